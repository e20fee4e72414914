//! Strict order (`order = "strict"`): ids of a sequence namespace that increase across every
//! node in real time. An id handed out by a request that started after another request
//! completed is larger than every id of that request (a linearizable counter).
//!
//! How (docs/strict.md has the argument and the tests):
//! - **one leader**: the node holding the namespace's leader lease (a worker lease of group
//!   `<namespace>:leader` with one worker id, [`idmint_store::WorkerLeases`]: fencing token,
//!   expiry by the authority's clock) serves the namespace from its own supply;
//! - **terms**: the leader answers only within its [`term::Term`]: the supply's
//!   `supply::ServeGate` checks the term *after* a request took its ids, so no id
//!   taken after the term's deadline is answered (it goes back to the buffer);
//! - **above every earlier leader**: a new term starts by raising the supply's floor to the
//!   authority's watermark read once the lease is held (`Supply::start_above`):
//!   every id an earlier term served came from a block below it. Blocks kept in the data
//!   directory are never used by a strict namespace;
//! - **followers forward**, batched ([`crate::peers::batch`]), to the url the leader recorded with its
//!   lease, one hop: a node that does not lead answers `no_leader`, and the follower looks
//!   again;
//! - **no leader**: a request waits up to `peers.wait_ms` for one (a failover, an authority
//!   that does not answer), then answers `no_leader`. It never falls back to local ids.
//!
//! Only an authority that grants every block from one watermark serves strict namespaces
//! (checked in the configuration): not `multi`, not `upstream`.

mod lead;
pub mod term;

pub use crate::peers::{holder_base, url_of, Peers};

use crate::config::LeaseSettings;
use crate::error::IdError;
use crate::peers::batch::{self, Batcher};
use crate::peers::ForwardError;
use crate::supply::{ServeGate, Supply};
use crate::time::SharedClock;
use arc_swap::ArcSwapOption;
use idmint_core::{Backoff, Clock, NamespaceName};
use idmint_proto::v1::ForwardRequest;
use idmint_store::{Authority, WorkerLease};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use term::Term;
use tokio::sync::{watch, Notify};

/// What this node is for one strict namespace now.
#[derive(Debug, Clone)]
pub enum Role {
    /// No leader known: at start, after a term ended, or while the authority does not answer.
    Seeking(String),
    /// This node leads, in this term.
    Leader(Arc<Term>),
    /// Another node leads: where to forward, and who it is.
    Follower {
        /// Its gRPC url (`peers.advertise` on that node).
        url: String,
        /// The lease's holder (host, process, url).
        holder: String,
    },
}

/// The current term of a leader, checked after every take ([`ServeGate`]).
#[derive(Debug)]
struct TermGate {
    term: ArcSwapOption<Term>,
    clock: SharedClock,
}

impl ServeGate for TermGate {
    fn admit(&self, name: &NamespaceName) -> Result<(), IdError> {
        match &*self.term.load() {
            Some(t) if t.valid_at(self.clock.monotonic_nanos()) => Ok(()),
            _ => Err(IdError::NoLeader {
                name: name.to_string(),
                reason: "this node's term as its leader ended".into(),
            }),
        }
    }
}

/// One strict namespace on this node: its role, its leader's term, its forwards.
#[derive(Debug)]
pub struct Strict {
    name: NamespaceName,
    group: NamespaceName,
    bits: u32,
    supply: Arc<Supply>,
    authority: Arc<dyn Authority>,
    clock: SharedClock,
    leases: LeaseSettings,
    peers: Arc<Peers>,
    role: watch::Sender<Role>,
    gate: Arc<TermGate>,
    batcher: Arc<Batcher<()>>,
    /// Wakes the leadership task early (a forward failed: the leader may be gone).
    look_again: Notify,
    /// The leader lease held when the leadership task stopped, released after the hand-back.
    held: Mutex<Option<WorkerLease>>,
}

/// The lease group of `name`'s leader: `<name>:leader`. A snowflake namespace could be called
/// that too; the group's recorded layout ([`LEADER_LAYOUT`]) keeps the two apart (the second
/// to acquire is refused, never shares).
pub fn leader_group(name: &NamespaceName) -> Result<NamespaceName, IdError> {
    Ok(NamespaceName::new(&format!("{name}{LEADER_SUFFIX}"))?)
}

/// What a leader group's name ends with ([`leader_group`]); no lower tier reaches such a group
/// (the node's `leases::is_internal_group`).
pub const LEADER_SUFFIX: &str = ":leader";

/// The layout text a leader group records.
pub const LEADER_LAYOUT: &str = "strict-leader";

impl Strict {
    /// The strict side of namespace `name` (of `bits`-bit ids) served from `supply`; its
    /// leadership task is [`Strict::lead`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: NamespaceName,
        bits: u32,
        supply: Arc<Supply>,
        authority: Arc<dyn Authority>,
        clock: SharedClock,
        leases: LeaseSettings,
        peers: Arc<Peers>,
        max_batch: u64,
    ) -> Result<Arc<Strict>, IdError> {
        let gate = Arc::new(TermGate {
            term: ArcSwapOption::empty(),
            clock: clock.clone(),
        });
        supply.set_serve_gate(gate.clone());
        Ok(Arc::new(Strict {
            group: leader_group(&name)?,
            name,
            bits,
            supply,
            authority,
            clock,
            leases,
            peers,
            role: watch::Sender::new(Role::Seeking("looking for the leader".into())),
            gate,
            batcher: Arc::new(Batcher::new(max_batch)),
            look_again: Notify::new(),
            held: Mutex::new(None),
        }))
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// Who leads, for `/v1/namespaces` and the status page.
    pub fn leader_state(&self) -> idmint_api::LeaderState {
        let mut state = idmint_api::LeaderState {
            role: String::new(),
            url: None,
            holder: None,
            term: None,
            reason: None,
        };
        match self.role() {
            Role::Leader(term) => {
                state.role = "leader".into();
                state.url = Some(self.peers.config().advertise.clone());
                state.term = Some(term.token());
            }
            Role::Follower { url, holder } => {
                state.role = "follower".into();
                state.url = Some(url);
                state.holder = Some(idmint_store::lease::public_holder(&holder).to_owned());
            }
            Role::Seeking(why) => {
                state.role = "seeking".into();
                state.reason = Some(why);
            }
        }
        state
    }

    /// `count` ids (`consecutive`: as one block), increasing, from the leader: this node's
    /// supply while it leads, else forwarded. Waits up to `peers.wait_ms` for a leader.
    pub async fn take(&self, count: u64, consecutive: bool) -> Result<Vec<u64>, IdError> {
        let wait = self.peers.config().wait;
        let give_up = tokio::time::Instant::now() + wait;
        let mut roles = self.role.subscribe();
        let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
        let mut why;
        loop {
            let role = roles.borrow_and_update().clone();
            match role {
                Role::Leader(term) if term.valid_at(self.clock.monotonic_nanos()) => {
                    match self.local(count, consecutive).await {
                        Err(IdError::NoLeader { reason, .. }) => why = reason,
                        other => return other,
                    }
                }
                Role::Leader(_) => why = "this node's term as its leader ran out".into(),
                Role::Follower { url, .. } => match self.forward(&url, count, consecutive).await {
                    Ok(ids) => return self.checked(ids, count),
                    Err(ForwardError::Answer { code, message }) => {
                        return Err(self.leader_error(&code, message))
                    }
                    Err(ForwardError::Retry(reason)) => {
                        self.look_again.notify_one();
                        why = reason;
                    }
                },
                Role::Seeking(reason) => why = reason,
            }
            let now = tokio::time::Instant::now();
            if now >= give_up {
                return Err(IdError::NoLeader {
                    name: self.name.to_string(),
                    reason: format!("none within {} ms (peers.wait_ms): {why}", wait.as_millis()),
                });
            }
            let pause = (now + backoff.delay()).min(give_up);
            tokio::select! {
                changed = roles.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep_until(pause).await;
                    }
                }
                _ = tokio::time::sleep_until(pause) => {}
            }
        }
    }

    /// A leader's answer, checked before a caller sees it: at most `count` ids, strictly
    /// increasing, every one of this namespace's space. A leader answering otherwise (another
    /// spec, a bug) is refused, never passed on.
    fn checked(&self, ids: Vec<u64>, count: u64) -> Result<Vec<u64>, IdError> {
        let space = self.supply.space();
        let fits = ids.len() as u64 <= count
            && ids.windows(2).all(|w| w[0] < w[1])
            && ids.iter().all(|&id| space.contains(id));
        if fits {
            return Ok(ids);
        }
        tracing::error!(namespace = %self.name, ids = ids.len(), count, "the leader answered ids outside this namespace or out of order; refused");
        Err(IdError::NoLeader {
            name: self.name.to_string(),
            reason: "the leader answered ids outside this namespace or out of order".into(),
        })
    }

    /// A follower's forward, answered here: only while this node leads, without waiting and
    /// without forwarding again (one hop).
    pub async fn serve_forwarded(
        &self,
        count: u64,
        consecutive: bool,
    ) -> Result<(Vec<u64>, u64), IdError> {
        match self.role() {
            Role::Leader(term) if term.valid_at(self.clock.monotonic_nanos()) => {
                let ids = self.local(count, consecutive).await?;
                Ok((ids, term.token()))
            }
            Role::Leader(_) => Err(self.not_leading("its term as leader ran out")),
            Role::Follower { url, .. } => Err(self.not_leading(&format!("the leader is at {url}"))),
            Role::Seeking(why) => Err(self.not_leading(&why)),
        }
    }

    fn not_leading(&self, why: &str) -> IdError {
        IdError::NoLeader {
            name: self.name.to_string(),
            reason: format!("this node does not lead it ({why})"),
        }
    }

    /// Ids from this node's own supply; its gate refuses them once the term is over.
    async fn local(&self, count: u64, consecutive: bool) -> Result<Vec<u64>, IdError> {
        if consecutive {
            return match self.supply.consecutive(count, self.bits).await? {
                Some(block) => Ok(block.ids().collect()),
                None => Err(IdError::InvalidCount(format!(
                    "the namespace's blocks hold fewer than {count} consecutive ids; ask for \
                     {count} ids without requiring them consecutive"
                ))),
            };
        }
        self.supply.ids(count, self.bits).await
    }

    /// Queues the request for a forward to `url` and waits for its share.
    async fn forward(
        &self,
        url: &str,
        count: u64,
        consecutive: bool,
    ) -> Result<Vec<u64>, ForwardError> {
        let answer = self.batcher.enqueue(count, consecutive, ());
        send_batches(&self.batcher, &self.peers, url, self.name.as_str());
        answer
            .await
            .unwrap_or_else(|_| Err(ForwardError::Retry("the forward was dropped".into())))
    }

    /// The domain error of the leader's answer `code`.
    fn leader_error(&self, code: &str, message: String) -> IdError {
        match code {
            "namespace_exhausted" => IdError::Exhausted {
                name: self.name.to_string(),
                bits: self.bits,
            },
            "invalid_count" => IdError::InvalidCount(message),
            _ => IdError::NoLeader {
                name: self.name.to_string(),
                reason: format!("{message} ({code})"),
            },
        }
    }

    /// Releases the leader lease kept when the leadership task stopped, after the supply's
    /// tail went back: the next leader then starts at the lowest id nobody served.
    pub async fn release(&self) {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(lease) = held else { return };
        let Some(leases) = self.authority.worker_leases() else {
            return;
        };
        match leases.release(&lease, 0).await {
            Ok(()) => {
                tracing::info!(namespace = %self.name, token = lease.token, "released the leader lease")
            }
            Err(e) => {
                tracing::warn!(namespace = %self.name, error = %e, "could not release the leader lease; it expires on its own")
            }
        }
    }
}

/// Sends every batch a free slot allows, each from its own task (a batch is answered even if
/// the request that sent it is dropped); a finished forward sends what queued up meanwhile.
fn send_batches(batcher: &Arc<Batcher<()>>, peers: &Arc<Peers>, url: &str, name: &str) {
    while let Some((permit, batch)) = batcher.next_batch() {
        let total = batch.iter().map(|w| w.count).sum();
        let alone = batch.len() == 1 && batch[0].alone;
        let (batcher, peers) = (batcher.clone(), peers.clone());
        let (url, name) = (url.to_owned(), name.to_owned());
        tokio::spawn(async move {
            let request = ForwardRequest {
                namespace: name.clone(),
                count: total,
                consecutive: alone,
                shard: None,
                parts: Vec::new(),
                challenge: Vec::new(),
            };
            let result = peers.forward(&url, request).await;
            batch::distribute(batch, result.map(|(ids, _)| ids));
            drop(permit);
            send_batches(&batcher, &peers, &url, &name);
        });
    }
}
