//! idmint-store: authorities, the durable home of each sequence namespace's high watermark.
//!
//! An authority keeps, per namespace, its [`SequenceSpec`] (which ids it may ever hand out) and
//! its **watermark**: every id below it has been reserved once, every id at or above it is free.
//! A node asks the authority for a block with [`Authority::reserve`]; the authority moves the
//! watermark to the block's end and makes that durable before it answers. Backends plug in behind
//! the one object-safe, async [`Authority`] trait, held as `Arc<dyn Authority>`:
//!
//! - [`MemoryAuthority`]: in memory, for tests; nothing survives the process.
//! - `FileAuthority` (cargo feature `file`, on by default): an embedded redb file, the default
//!   backend of `idmint serve`; one process per data directory.
//! - `postgres`, `mysql`, `etcd`, `zookeeper`, `redis` (cargo features of the same names):
//!   networked backends.
//! - [`MultiAuthority`]: several authorities, each owning one residue class; their health and
//!   the ones to audit through [`Authority::members`] ([`Members`]).
//! - `upstream` (cargo feature `upstream`): other idmint nodes over gRPC, the tier above
//!   (`UpstreamAuthority`).
//! - worker leases for snowflake namespaces ([`lease`], [`WorkerLeases`]): with fencing
//!   tokens, a durable time floor and a layout lock, in the backends that can store them
//!   ([`Authority::worker_leases`]).
//! - the audit ledger ([`audit`], [`AuditLog`]): what a store granted, kept in the store.
//! - the node record ([`node_record`], [`CheckedAuthority`]): what one node remembers of its
//!   store, in its data directory, to refuse a store that moved or lost data.
//! - `conformance` (cargo feature `conformance`): the test suite every backend must pass.
//!
//! The crate also owns the authority's configuration ([`config`], [`AuthorityConfig`]) and
//! turns it into a backend ([`connect()`]), so adding a backend touches this crate and the docs
//! only.
//!
//! Invariants every backend keeps (numbers from docs/design.md):
//! - (1) `reserve` returns only after a watermark at or above the block's end is durable, so an
//!   id of the block may be handed out as soon as the call returns;
//! - (2) a watermark never goes down, except by the compare-and-swap of
//!   [`Authority::give_back`], which only succeeds while nothing was reserved after the block
//!   whose tail is handed back;
//! - concurrent reservations, from tasks of one process or from several processes sharing one
//!   backend, get disjoint blocks (each is one atomic read-modify-write of the watermark);
//! - (5) every id returned is of the namespace's residue class (`id ≡ offset mod step`);
//! - (6) a 32-bit namespace never wraps: the last block is cut at 2^31 - 1, then
//!   [`StoreError::Exhausted`];
//! - a **retired** namespace ([`Advance::Retire`]) carries a mark in its own record, written in
//!   the same atomic write that moves its watermark past the largest id, and never cleared:
//!   from then on `reserve` answers [`StoreError::Retired`] (not `Exhausted`, which stays the
//!   answer of a namespace whose ids ran out) and [`NamespaceState::retired`] is `true`. A
//!   watermark value alone cannot say it: the last block of an exhausted namespace may end
//!   exactly where a retirement puts the watermark. A record without the mark (any record
//!   written before marks existed) is live.
//!
//! The block arithmetic itself is [`idmint_core`]'s ([`SequenceSpec::reserve`]); this crate only
//! records its results durably and atomically.
//!
//! What it does not do: buffering, refill policy or block sizing (the node's), networking,
//! or retries: a backend that cannot reach its storage answers
//! [`StoreError::Unavailable`] and the caller decides.

use async_trait::async_trait;
use idmint_core::{Block, BlockError, NamespaceName, SequenceSpec};
use std::path::PathBuf;
use thiserror::Error;

pub mod audit;
pub mod config;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod connect;
pub mod deferred;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "file")]
mod file;
pub mod incarnation;
pub mod kept;
pub mod lease;
mod memory;
mod multi;
#[cfg(feature = "mysql")]
pub mod mysql;
pub mod node_record;
mod outcome;
pub mod parks;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod pool;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
mod source;
pub mod tls;
#[cfg(feature = "upstream")]
pub mod upstream;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use audit::{Advance, Advanced, AuditEntry, AuditEvent, AuditLog, AuditReport};
pub use config::AuthorityConfig;
pub use connect::{connect, connect_observed, ConnectError};
pub use deferred::DeferredAuthority;
#[cfg(feature = "file")]
pub use file::{FileAuthority, FILE_NAME};
pub use incarnation::Incarnation;
pub use lease::{LeaseError, LeaseRequest, WorkerChoice, WorkerLease, WorkerLeases};
pub use memory::MemoryAuthority;
pub use multi::{AuditedMember, MemberEvents, MemberHealth, MemberSlot, Members, MultiAuthority};
pub use node_record::{CheckedAuthority, NodeRecord, NodeRecordError, StoreExpectations};
pub use outcome::Outcome;
pub use parks::{ClaimKey, Parks};
pub use source::BlockSource;
#[cfg(feature = "upstream")]
pub use upstream::UpstreamAuthority;

/// One upper node of an upstream authority as this node sees it ([`Authority::upper_nodes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpperNode {
    /// Its url, without secrets.
    pub url: String,
    /// Whether calls go to it first (it answered last, or no other did yet).
    pub current: bool,
    /// Whether its latest call answered; `None` before the first call.
    pub answered: Option<bool>,
    /// Why its latest call failed, when it did.
    pub last_error: Option<String>,
}

/// The durable home of sequence namespaces' watermarks.
///
/// Every method is atomic: it either happens entirely and durably, or not at all (an `Err` leaves
/// the stored state as it was, except [`StoreError::Unavailable`], after which the caller cannot
/// know whether a write reached the storage and must not hand out ids it did not get back).
#[async_trait]
pub trait Authority: Send + Sync + std::fmt::Debug + 'static {
    /// Short backend name for logs/metrics: "file", "memory", ...
    fn kind(&self) -> &'static str;

    /// The members of an authority made of several ([`MultiAuthority`]): their health and the
    /// ones to audit ([`Members`]). `None` for a single authority, whose health is the outcome
    /// of its operations.
    fn members(&self) -> Option<&dyn Members> {
        None
    }

    /// The upper nodes of an authority whose blocks come from other idmint nodes
    /// ([`UpstreamAuthority`]), in config order, with what each one's latest call found (no
    /// I/O); empty for every other authority.
    fn upper_nodes(&self) -> Vec<UpperNode> {
        Vec::new()
    }

    /// The residue classes (ids modulo `spec.step()`) of the ids this authority may grant for a
    /// namespace of `spec`: the spec's own offset for a single authority, every member's offset
    /// for a [`MultiAuthority`] (whose namespace-level spec has offset 0). The node checks every
    /// block against them before handing out an id of it, and decode uses them.
    fn residues(&self, spec: &SequenceSpec) -> Vec<u64> {
        vec![spec.offset()]
    }

    /// Tells the authority that every id of `name` below `floor` was granted before (the
    /// node record holds it): an authority whose blocks come from several sources that it
    /// cannot order by a store watermark ([`UpstreamAuthority`]) returns nothing below it from
    /// now on. A single store needs no hint: its next block starts at its watermark, which the
    /// node record checks is at least `floor`.
    fn note_floor(&self, name: &NamespaceName, floor: u64) {
        let _ = (name, floor);
    }

    /// Writes what the authority holds only in memory (the node record's latest watermarks),
    /// at a clean shutdown, after the last give-back.
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Whether [`Authority::state`]'s watermark is the store's, at or above every id ever
    /// granted, so a node may refuse a lower one as a store that lost data. An upstream
    /// authority reports one upper node's view instead (each upper node knows the blocks it
    /// reserved), and keeps a restarted node above what it served by [`Authority::note_floor`].
    fn reports_store_watermark(&self) -> bool {
        true
    }

    /// The worker leases this authority stores next to its watermarks ([`lease`]), or `None`
    /// if it cannot store them (then snowflake namespaces need a fixed worker id that the
    /// operator keeps unique).
    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        None
    }

    /// The audit ledger this authority writes next to its watermarks ([`audit`]), or `None`
    /// if it keeps none (memory-less wrappers forward their inner authority's; a multi
    /// authority's members keep their own; an upstream authority's tier above keeps it).
    fn audit_log(&self) -> Option<&dyn AuditLog> {
        None
    }

    /// The store's incarnation ([`incarnation`]): `Ok(None)` if it has none yet (a new or
    /// emptied store, or one that holds data but was never given one). Reads only. Authorities
    /// that keep none of their own (multi, upstream) answer [`StoreError::NotSupported`].
    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        Err(StoreError::NotSupported {
            backend: self.kind(),
            what: "a store incarnation",
        })
    }

    /// Writes `candidate` as the store's incarnation if it has none, atomically (two callers
    /// racing agree on one), durably before `Ok`; returns the incarnation the store holds
    /// afterwards (`candidate`, or the one it already had).
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let _ = candidate;
        Err(StoreError::NotSupported {
            backend: self.kind(),
            what: "a store incarnation",
        })
    }

    /// Moves the namespace's watermark up to `to` (never down), recording the move in the
    /// audit ledger as `why` in the same atomic write: `idmint admin rebase` (to start above
    /// ids that exist elsewhere) and `idmint admin retire` (`to` = one past the largest id),
    /// which also sets the retired mark ([`NamespaceState::retired`]) in that write.
    ///
    /// A watermark already at or above `to` (and, for a retirement, already marked) is left as
    /// it is (`Ok`, with `from` equal to it): the call can be repeated. `to` above one past the
    /// largest id is `Err(StoreError::Exhausted{..})`; unknown namespace:
    /// `Err(StoreError::UnknownNamespace)`.
    /// Authorities that cannot move a watermark (an upstream one: the tier above owns it)
    /// answer [`StoreError::NotSupported`].
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        let _ = (name, to, why);
        Err(StoreError::NotSupported {
            backend: self.kind(),
            what: "moving a watermark (rebase, retire)",
        })
    }

    /// Creates the namespace with `spec` if absent (watermark = `spec.initial_watermark()`).
    /// If present with the same spec, returns its state unchanged. If present with a different
    /// spec: `Err(StoreError::SpecConflict{..})`.
    ///
    /// On `Ok` the namespace and its spec are durable. Concurrent calls for the same name create
    /// it once; the losers see it as present.
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError>;

    /// Atomically reserves up to `count` ids: new watermark = `block.end()`, durable before `Ok`.
    /// Concurrent callers (also other processes on the same backend) get disjoint blocks.
    ///
    /// The block is shorter than `count` only at the end of the id space. On `Ok` the block is
    /// the caller's alone: no other call, in this or another process, will ever get any of its
    /// ids (unless the caller hands its tail back with [`Authority::give_back`]).
    ///
    /// Unknown namespace: `Err(StoreError::UnknownNamespace)`. Retired:
    /// `Err(StoreError::Retired{..})`. No id left: `Err(StoreError::Exhausted{..})`.
    /// `count == 0`: `Err(StoreError::InvalidCount)`.
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError>;

    /// Current durable state, `None` if absent.
    ///
    /// The watermark may be stale by the time the caller looks at it: it is a report, not a
    /// reservation.
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError>;

    /// All namespaces, sorted by name.
    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError>;

    /// Hands back the unused tail `[tail.start(), tail.end())` of the newest block:
    /// compare-and-swap of the watermark from `tail.end()` to `tail.start()`.
    ///
    /// Returns [`GiveBack::Returned`] if the watermark was exactly `tail.end()` (nothing reserved
    /// since), [`GiveBack::Refused`] with the current watermark otherwise (nothing changed).
    /// On `Returned` the lowered watermark is durable and the caller must not hand out any id of
    /// the tail any more: they will be reserved again by the next caller.
    ///
    /// A tail that cannot be part of a block of this namespace (other step, outside the residue
    /// class, below the first id) is `Err(StoreError::InvalidTail{..})`; unknown namespace is
    /// `Err(StoreError::UnknownNamespace)`.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError>;

    /// Parks `blocks` of `name` under `key` ([`parks`]): unused blocks this caller holds at its
    /// clean stop, recorded (with a `parked` entry per block in the audit ledger) so that it can
    /// claim them back with [`Authority::claim`] after a restart. One atomic, durable write; the
    /// blocks must lie below the watermark, be of the namespace's spec and overlap no other
    /// park (else [`StoreError::InvalidTail`]); a retired namespace is
    /// [`StoreError::Retired`]. Backends that keep no parks answer
    /// [`StoreError::NotSupported`] (the caller burns the blocks).
    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        let _ = (name, key, blocks);
        Err(StoreError::NotSupported {
            backend: self.kind(),
            what: "parking blocks",
        })
    }

    /// Claims the blocks parked under `key` ([`parks`]) and returns them: one atomic, durable
    /// write that removes the park and records a `claimed` entry per block, so a second claim
    /// is [`StoreError::NotParked`]. A retired namespace is [`StoreError::Retired`]; what a
    /// rebase dropped is not returned. Once this answers `Ok`, the blocks are the caller's.
    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        let _ = (name, key);
        Err(StoreError::NotSupported {
            backend: self.kind(),
            what: "claiming parked blocks",
        })
    }
}

/// A namespace as the authority records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceState {
    /// The namespace.
    pub name: NamespaceName,
    /// Which ids it may hand out.
    pub spec: SequenceSpec,
    /// Every id below it has been reserved; every id of the spec at or above it is free.
    pub watermark: u64,
    /// Retired for good (`idmint admin retire`): it hands out no id any more, and says so
    /// ([`StoreError::Retired`]); its watermark is past its largest id.
    pub retired: bool,
}

impl NamespaceState {
    /// The state of a namespace just created with `spec`.
    pub fn new(name: NamespaceName, spec: SequenceSpec) -> Self {
        let watermark = spec.initial_watermark();
        NamespaceState {
            name,
            spec,
            watermark,
            retired: false,
        }
    }

    /// How many ids of the spec have been reserved (lie below the watermark).
    pub fn ids_used(&self) -> u64 {
        self.spec.ids_between(self.spec.first(), self.watermark)
    }

    /// How many ids of the spec are left (at or above the watermark).
    pub fn ids_left(&self) -> u64 {
        self.spec.ids_between(self.watermark, u64::MAX)
    }
}

/// A block reserved by [`Authority::reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// The ids reserved, the caller's alone.
    pub block: Block,
    /// The namespace's watermark after the reservation (`block.end()`), durable.
    pub watermark: u64,
}

/// The outcome of [`Authority::give_back`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// The watermark was the tail's end and is now the tail's start.
    Returned,
    /// Something was reserved after the tail's block (or the tail was already handed back):
    /// nothing changed.
    Refused {
        /// The current watermark (an upstream authority: the highest block end it returned).
        watermark: u64,
    },
    /// Only the last `ids` ids of the tail went back; the ids before them are burned. An upstream
    /// authority answers this for a tail that began in an older block than the newest one it was
    /// granted (the node's buffer merged contiguous blocks): the tier above takes back only a
    /// tail of the newest block it leased.
    Partly {
        /// How many ids went back (the tail's last ones).
        ids: u64,
    },
}

/// Errors of authorities.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The namespace does not exist in the authority.
    #[error("namespace {name} does not exist")]
    UnknownNamespace {
        /// The namespace asked for.
        name: NamespaceName,
    },
    /// The namespace exists with another spec, or (Flickr ticket mode) the server's
    /// auto-increment settings issue another residue class than the namespace's.
    #[error("{}", describe_conflict(name, existing, requested, server.as_ref()))]
    SpecConflict {
        /// The namespace.
        name: NamespaceName,
        /// The spec it was created with, or the one the ticket server issues.
        existing: SequenceSpec,
        /// The spec asked for.
        requested: SequenceSpec,
        /// With a ticket server: its settings, which the message turns into the lines to set.
        server: Option<AutoIncrementSettings>,
    },
    /// No id of the namespace is left at or above the watermark.
    #[error("namespace {name} is exhausted: no {bits}-bit id left at or above {watermark}")]
    Exhausted {
        /// The namespace.
        name: NamespaceName,
        /// Its width in bits (32 or 64).
        bits: u32,
        /// Its watermark.
        watermark: u64,
    },
    /// The namespace was retired (`idmint admin retire`): it hands out no id any more.
    #[error("namespace {name} is retired: it hands out no id any more")]
    Retired {
        /// The namespace.
        name: NamespaceName,
    },
    /// The backend cannot be reached or failed to read or write (I/O). The outcome of a write
    /// that failed this way is unknown.
    #[error("{backend} authority unavailable: {message}")]
    Unavailable {
        /// The backend's [`Authority::kind`].
        backend: &'static str,
        /// What failed.
        message: String,
    },
    /// The data directory is in use by another process (or another open in this one).
    #[error("data directory {} is in use by another idmint process (one process per directory)", path.display())]
    Locked {
        /// The locked path.
        path: PathBuf,
    },
    /// Stored data is not what this version wrote.
    #[error("stored data is corrupt: {message}")]
    Corrupt {
        /// What is wrong, and where.
        message: String,
    },
    /// A reservation asked for zero ids.
    #[error("a reservation must ask for at least one id")]
    InvalidCount,
    /// The authorities are set up in a way that could hand out an id twice (e.g. two members of
    /// a [`MultiAuthority`] owning the same residue class).
    #[error("invalid authority setup: {message}")]
    InvalidSetup {
        /// What is wrong.
        message: String,
    },
    /// A namespace known to exist is missing from its store, or its store went back in time:
    /// the store lost data (a restored backup, a replaced or wiped server, a moved data
    /// directory, a changed `path`/`table`/`prefix`). Re-creating it would re-issue ids, so it
    /// is never re-created automatically: an operator re-seeds it above every id ever handed out
    /// (`idmint admin reseed`, docs/uniqueness.md).
    #[error("namespace {name} lost: {message}")]
    Lost {
        /// The namespace.
        name: NamespaceName,
        /// What was found, where, and what to do.
        message: String,
    },
    /// The store is not the one this node (or its configuration) knows: its incarnation
    /// ([`incarnation`]) is missing or another, so it was emptied, restored from an older or
    /// empty backup, re-created, or the configuration points at another store. Nothing is
    /// created or leased in it: starting fresh there would hand out ids and worker ids that were
    /// handed out before.
    #[error("store lost: {message}")]
    StoreLost {
        /// What was found, where, and what to do.
        message: String,
    },
    /// The authority cannot do this (e.g. an upstream authority cannot move a watermark that
    /// the tier above owns).
    #[error("the {backend} authority does not support {what}")]
    NotSupported {
        /// The backend's [`Authority::kind`].
        backend: &'static str,
        /// What was asked.
        what: &'static str,
    },
    /// [`Authority::claim`] found no park under the key: it was claimed before (a copied or
    /// restored data directory), dropped by a retirement or rebase, or never made in this store.
    #[error("no blocks of namespace {name} are parked under this claim key (claimed before, dropped by a rebase or retirement, or never parked in this store)")]
    NotParked {
        /// The namespace.
        name: NamespaceName,
    },
    /// [`Authority::give_back`] was given a tail that no reservation of the namespace returns.
    #[error("cannot give back [{start}, {end}) step {step} to namespace {name}: {reason}")]
    InvalidTail {
        /// The namespace.
        name: NamespaceName,
        /// The tail's start.
        start: u64,
        /// The tail's end.
        end: u64,
        /// The tail's step.
        step: u64,
        /// Why it is not a tail of this namespace.
        reason: &'static str,
    },
}

impl StoreError {
    /// Whether the backend could not be reached (the node answers 503 and may retry later).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// Whether the namespace does not exist.
    pub fn is_unknown_namespace(&self) -> bool {
        matches!(self, StoreError::UnknownNamespace { .. })
    }

    /// Whether the store lost the namespace ([`StoreError::Lost`]) or is not the store it
    /// should be ([`StoreError::StoreLost`]).
    pub fn is_lost(&self) -> bool {
        matches!(self, StoreError::Lost { .. } | StoreError::StoreLost { .. })
    }

    /// Whether the namespace has no id left because its ids ran out (not a retirement:
    /// [`StoreError::is_retired`]).
    pub fn is_exhausted(&self) -> bool {
        matches!(self, StoreError::Exhausted { .. })
    }

    /// Whether the namespace was retired.
    pub fn is_retired(&self) -> bool {
        matches!(self, StoreError::Retired { .. })
    }
}

/// A ticket server's `auto_increment_increment` and `auto_increment_offset`, as the server
/// reported them (MySQL's offset counts from 1; idmint's `offset` is it modulo the increment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoIncrementSettings {
    /// `auto_increment_increment`.
    pub increment: u64,
    /// `auto_increment_offset`.
    pub offset: u64,
}

/// The message of [`StoreError::SpecConflict`]: for a ticket server, the server variables it
/// has and the `my.cnf` lines that would make it issue the namespace's class.
fn describe_conflict(
    name: &NamespaceName,
    existing: &SequenceSpec,
    requested: &SequenceSpec,
    server: Option<&AutoIncrementSettings>,
) -> String {
    match server {
        None => format!(
            "namespace {name} exists with {} but {} was requested",
            describe_spec(existing),
            describe_spec(requested)
        ),
        Some(a) => {
            // MySQL's offset of the class `offset` (mod step) is `offset`, or `step` for 0.
            let mysql_offset = if requested.offset() == 0 {
                requested.step()
            } else {
                requested.offset()
            };
            format!(
                "namespace {name} needs step {}, offset {}, but this MySQL server has \
                 auto_increment_increment = {} and auto_increment_offset = {} (step {}, offset {}): \
                 set `auto_increment_increment = {}` and `auto_increment_offset = {mysql_offset}` \
                 under [mysqld] in its my.cnf and restart it (or SET GLOBAL both and reconnect), \
                 or give the namespace the server's step and offset",
                requested.step(),
                requested.offset(),
                a.increment,
                a.offset,
                existing.step(),
                existing.offset(),
                requested.step(),
            )
        }
    }
}

/// "64-bit ids from 1, step 1, offset 0", for error messages.
fn describe_spec(spec: &SequenceSpec) -> String {
    format!(
        "{}-bit ids from {}, step {}, offset {}",
        spec.width().bits(),
        spec.first(),
        spec.step(),
        spec.offset()
    )
}

/// The operations every backend performs inside its atomic read-modify-write, on a namespace's
/// recorded state. Backends differ only in how they make the read and the write atomic and
/// durable.
pub(crate) mod ops {
    use super::*;
    use idmint_core::Width;

    /// How often the SQL backends (PostgreSQL, MySQL block mode) run a `reserve` or `give_back`
    /// statement again when it changed nothing and the read that explains why shows a
    /// concurrent writer changed the row in between: a `give_back` that lowered the watermark
    /// under a `reserve` whose room check failed, or a reservation and a give-back that put the
    /// watermark back at a tail's end under a compare-and-swap. Each re-run is safe (the
    /// previous statement definitely changed nothing, so nothing can be granted twice); the
    /// race needs a give-back, which a node makes once, at shutdown, so more than a few rounds
    /// in a row mean a livelock, and the bound turns it into [`StoreError::Unavailable`].
    ///
    /// `MAX_CONFLICTS` is another bound: in the compare-and-swap backends every write of
    /// every node may lose to any other, so conflicts are routine under load, not a give-back
    /// race.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) const GIVE_BACK_RACE_ATTEMPTS: usize = 8;

    /// How many compare-and-swap conflicts one operation of a compare-and-swap backend (etcd,
    /// ZooKeeper) accepts before giving up with [`StoreError::Unavailable`].
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "redis"))]
    pub const MAX_CONFLICTS: u32 = 32;

    /// Conflicts retried at once (a fresh read is as fresh as data gets) before backing off.
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "redis"))]
    const EAGER_RETRIES: u32 = 3;

    /// The pauses between the conflicting tries of one compare-and-swap operation: the first
    /// [`EAGER_RETRIES`] at once, then random and exponential from 2 ms to 64 ms, so writers
    /// that collided step apart; `None` after [`MAX_CONFLICTS`].
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "redis"))]
    pub(crate) fn conflict_backoff() -> idmint_core::Backoff {
        use std::time::Duration;
        idmint_core::Backoff::new(Duration::from_millis(2), Duration::from_millis(64))
            .immediate(EAGER_RETRIES)
            .limit(MAX_CONFLICTS)
    }

    /// A namespace state read back from storage, validated: the spec must be one
    /// [`SequenceSpec::new`] accepts and the watermark must lie in `[initial, max_id + 1]`.
    /// The error says what is wrong; each backend wraps it in [`StoreError::Corrupt`] with the
    /// place it read from.
    #[cfg_attr(
        not(any(
            feature = "file",
            feature = "postgres",
            feature = "mysql",
            feature = "etcd",
            feature = "zookeeper",
            feature = "redis"
        )),
        allow(dead_code)
    )]
    pub(crate) fn stored_state(
        name: NamespaceName,
        width: Width,
        first: u64,
        step: u64,
        offset: u64,
        watermark: u64,
        retired: bool,
    ) -> Result<NamespaceState, String> {
        let spec = SequenceSpec::new(width, first, step, offset)
            .map_err(|e| format!("invalid spec: {e}"))?;
        let ceiling = width.max_id() + 1; // max_id is at most 2^63 - 1: no overflow
        if watermark < spec.initial_watermark() || watermark > ceiling {
            return Err(format!(
                "watermark {watermark} is outside [{}, {ceiling}]",
                spec.initial_watermark()
            ));
        }
        if retired && watermark != ceiling {
            return Err(format!(
                "retired with watermark {watermark}, not past the largest id ({ceiling})"
            ));
        }
        Ok(NamespaceState {
            name,
            spec,
            watermark,
            retired,
        })
    }

    /// The block to reserve from `state`; the new watermark is its end.
    pub(crate) fn reserve(state: &NamespaceState, count: u64) -> Result<Block, StoreError> {
        if count == 0 {
            return Err(StoreError::InvalidCount);
        }
        if state.retired {
            return Err(StoreError::Retired {
                name: state.name.clone(),
            });
        }
        state
            .spec
            .reserve(state.watermark, count)
            .map_err(|e| match e {
                BlockError::Exhausted {
                    bits, watermark, ..
                } => StoreError::Exhausted {
                    name: state.name.clone(),
                    bits,
                    watermark,
                },
                BlockError::EmptyRequest => StoreError::InvalidCount,
                other => StoreError::Corrupt {
                    message: format!(
                        "unexpected block arithmetic error for {}: {other}",
                        state.name
                    ),
                },
            })
    }

    /// The new watermark if `tail` may be given back (`Ok(Ok(start))`), the refusal otherwise.
    pub(crate) fn give_back(
        state: &NamespaceState,
        tail: Block,
    ) -> Result<Result<u64, GiveBack>, StoreError> {
        let spec = &state.spec;
        let invalid = |reason| StoreError::InvalidTail {
            name: state.name.clone(),
            start: tail.start(),
            end: tail.end(),
            step: tail.step(),
            reason,
        };
        if tail.step() != spec.step() {
            return Err(invalid("its step is not the namespace's"));
        }
        if tail.start() < spec.initial_watermark() {
            return Err(invalid("it starts below the namespace's first id"));
        }
        if spec.align_up(tail.start()) != Some(tail.start()) {
            return Err(invalid("its start is not of the namespace's residue class"));
        }
        if tail.start() > spec.width().max_id() {
            return Err(invalid("it starts above the namespace's largest id"));
        }
        #[cfg(feature = "planted")]
        if idmint_core::planted::on(idmint_core::planted::GIVEBACK_NO_CAS) {
            return Ok(Ok(tail.start()));
        }
        if state.watermark == tail.end() && !state.retired {
            Ok(Ok(tail.start()))
        } else {
            Ok(Err(GiveBack::Refused {
                watermark: state.watermark,
            }))
        }
    }

    /// The state after a forward-only move to `to` ([`Authority::advance`]): `Ok(None)` if
    /// the watermark is already there or above (and a retirement's mark already set),
    /// `Ok(Some(next))` otherwise. A retirement moves the watermark to the ceiling (one past the
    /// largest id) whatever `to` is at or below it, and sets the mark.
    pub(crate) fn advance(
        state: &NamespaceState,
        to: u64,
        why: crate::Advance,
    ) -> Result<Option<NamespaceState>, StoreError> {
        let ceiling = state.spec.width().max_id() + 1; // max_id is at most 2^63 - 1
        if to > ceiling {
            return Err(StoreError::Exhausted {
                name: state.name.clone(),
                bits: state.spec.width().bits(),
                watermark: to,
            });
        }
        let (to, retired) = match why {
            crate::Advance::Rebase => (to, state.retired),
            crate::Advance::Retire => (ceiling, true),
        };
        if to <= state.watermark && retired == state.retired {
            return Ok(None);
        }
        let mut next = state.clone();
        next.watermark = to.max(state.watermark);
        next.retired = retired;
        Ok(Some(next))
    }

    /// The audit event of a forward-only move from `from` to `to`.
    pub(crate) fn advance_event(why: crate::Advance, from: u64, to: u64) -> crate::AuditEvent {
        match why {
            crate::Advance::Rebase => crate::AuditEvent::Rebased { from, to },
            crate::Advance::Retire => crate::AuditEvent::Retired { from, to },
        }
    }

    /// What a compare-and-swap backend (etcd, ZooKeeper) decided from a namespace's current
    /// state: its `update` loop reads the state, asks one of the `decide_*` functions below,
    /// and writes the new state with its audit entry in one conditional write, or nothing.
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "redis"))]
    pub(crate) enum Decision<T> {
        /// Write this state and its audit entry in one conditional write, then answer `T`.
        Write(NamespaceState, crate::AuditEvent, T),
        /// Write nothing, answer `T`.
        Keep(T),
    }

    /// [`Authority::reserve`] as a [`Decision`].
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "redis"))]
    pub(crate) fn decide_reserve(
        state: &NamespaceState,
        count: u64,
    ) -> Result<Decision<Reservation>, StoreError> {
        let block = reserve(state, count)?;
        let mut next = state.clone();
        next.watermark = block.end();
        let event = crate::AuditEvent::Granted {
            start: block.start(),
            end: block.end(),
        };
        let answer = Reservation {
            block,
            watermark: block.end(),
        };
        Ok(Decision::Write(next, event, answer))
    }

    /// [`Authority::give_back`] as a [`Decision`].
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "redis"))]
    pub(crate) fn decide_give_back(
        state: &NamespaceState,
        tail: Block,
    ) -> Result<Decision<GiveBack>, StoreError> {
        Ok(match give_back(state, tail)? {
            Ok(watermark) => {
                let mut next = state.clone();
                next.watermark = watermark;
                let event = crate::AuditEvent::GivenBack {
                    start: tail.start(),
                    end: tail.end(),
                };
                Decision::Write(next, event, GiveBack::Returned)
            }
            Err(refused) => Decision::Keep(refused),
        })
    }

    /// [`Authority::advance`] as a [`Decision`].
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "redis"))]
    pub(crate) fn decide_advance(
        state: &NamespaceState,
        to: u64,
        why: crate::Advance,
    ) -> Result<Decision<crate::Advanced>, StoreError> {
        let from = state.watermark;
        Ok(match advance(state, to, why)? {
            Some(next) => {
                let event = advance_event(why, from, next.watermark);
                Decision::Write(next.clone(), event, crate::Advanced { from, state: next })
            }
            None => Decision::Keep(crate::Advanced {
                from,
                state: state.clone(),
            }),
        })
    }

    /// `Ok(Some(state))` to create, `Ok(None)` if `existing` already has `spec`, the conflict
    /// otherwise.
    pub(crate) fn ensure(
        name: &NamespaceName,
        existing: Option<&NamespaceState>,
        spec: SequenceSpec,
    ) -> Result<Option<NamespaceState>, StoreError> {
        match existing {
            None => Ok(Some(NamespaceState::new(name.clone(), spec))),
            Some(state) if state.spec == spec => Ok(None),
            Some(state) => Err(StoreError::SpecConflict {
                name: name.clone(),
                existing: state.spec,
                requested: spec,
                server: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::Width;

    fn name(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
    }

    #[test]
    fn state_counts_used_and_left() {
        let spec = SequenceSpec::new(Width::Bits32, 1, 2, 1).unwrap();
        let mut state = NamespaceState::new(name("a"), spec);
        assert_eq!(state.ids_used(), 0);
        assert_eq!(state.ids_left(), spec.capacity());
        state.watermark = 11; // 1,3,5,7,9 used
        assert_eq!(state.ids_used(), 5);
        assert_eq!(state.ids_left(), spec.capacity() - 5);
    }

    #[test]
    fn give_back_rejects_foreign_tails() {
        let spec = SequenceSpec::new(Width::Bits64, 10, 2, 0).unwrap();
        let mut state = NamespaceState::new(name("a"), spec);
        state.watermark = 30;
        let bad = [
            Block::new(20, 30, 3).unwrap(), // wrong step
            Block::new(21, 30, 2).unwrap(), // wrong residue
            Block::new(8, 30, 2).unwrap(),  // below first
        ];
        for tail in bad {
            assert!(matches!(
                ops::give_back(&state, tail),
                Err(StoreError::InvalidTail { .. })
            ));
        }
        let tail = Block::new(20, 30, 2).unwrap();
        assert_eq!(ops::give_back(&state, tail), Ok(Ok(20)));
        let stale = Block::new(20, 28, 2).unwrap();
        assert_eq!(
            ops::give_back(&state, stale),
            Ok(Err(GiveBack::Refused { watermark: 30 }))
        );
    }

    #[test]
    fn errors_read_clearly() {
        let e = StoreError::SpecConflict {
            name: name("photos"),
            existing: SequenceSpec::default_64(),
            requested: SequenceSpec::new(Width::Bits32, 1, 1, 0).unwrap(),
            server: None,
        };
        assert_eq!(
            e.to_string(),
            "namespace photos exists with 64-bit ids from 1, step 1, offset 0 \
             but 32-bit ids from 1, step 1, offset 0 was requested"
        );
        let e = StoreError::Locked {
            path: PathBuf::from("/data/idmint.redb"),
        };
        assert!(e.to_string().contains("/data/idmint.redb"));
        assert!(StoreError::Unavailable {
            backend: "file",
            message: "x".into()
        }
        .is_unavailable());
    }
}
