//! The ZooKeeper authority (cargo feature `zookeeper`): namespaces and their watermarks as
//! znodes of a ZooKeeper ensemble, updated by compare-and-swap on the znode's version, and
//! worker leases whose expiry is a ZooKeeper session's (the coordination the Snowflake and
//! HubSpot designs build on ZooKeeper).
//!
//! ## Znodes (record format v1)
//!
//! Everything lives under [`ZookeeperConfig::root`] (default `/idmint`), which is created
//! (with its parents) on connect, as are its three directories:
//!
//! ```text
//! <root>/namespaces/<name>                  persistent   idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001
//! <root>/leases/<group>                     persistent   idmint.group/v1 last_token=7 layout=<layout text>
//! <root>/leases/<group>/workers/<worker>    persistent   idmint.worker/v1 token=7 floor=1700000005000 holder=<holder text>
//! <root>/leases/<group>/live/<worker>       EPHEMERAL    idmint.live/v1 token=7 ttl_ms=10000 holder=<holder text>
//! <root>/incarnation                        persistent   <32 hex digits: the store's incarnation>
//! <root>/audit/<subject>                    persistent   (empty)
//! <root>/audit/<subject>/<10 digits>        PERSISTENT_SEQUENTIAL   v1 1700000005000 granted 1001 2001 web-1 pid 7
//! ```
//!
//! Values are one line of text (readable with `zkCli.sh get`), fields in this order, numbers in
//! decimal without sign or leading zeros; the free-text field (layout, holder) comes last and
//! runs to the end. A value that is not exactly the canonical encoding of a valid record
//! (another version, edited by hand, a watermark outside `[first, max_id + 1]`, a child name
//! that is not a namespace or worker id) is [`StoreError::Corrupt`], never a panic.
//!
//! ## The audit ledger ([`AuditLog`], [`crate::audit`])
//!
//! One persistent-sequential znode per entry under `<root>/audit/<subject>/` (subject: the
//! namespace, or the lease group of a worker-lease acquisition), named by ZooKeeper with the
//! parent's 10-digit sequence number, holding [`audit::encode_record`]'s line.
//!
//! - **Same write.** The entry is created by the very `multi` that writes the watermark
//!   (`setData` at the version read, then the create: `reserve`, a `give_back` that returns,
//!   an `advance` that moves it) or acquires a worker lease (the create, then the group,
//!   worker and live znodes), or re-establishes a lapsed lease in a renewal (the same token and
//!   holder, under a new session): no grant without its entry, no entry without its grant, also
//!   when a reply is lost. A refused give-back, an `advance` that changes nothing, a plain
//!   renewal and a release write none.
//! - **seq** is the sequence suffix: ZooKeeper numbers a parent's sequential children from its
//!   `cversion` when the transaction is applied, so seq increases in commit order within a
//!   subject. Pruning deletes entries but never the subject's directory, so the numbering
//!   continues after it. The counter is a 32-bit signed int: a subject takes at most
//!   2^31 - 1 child changes (an entry counts once when created and once when pruned), then
//!   ZooKeeper's names go negative and readers answer [`StoreError::Corrupt`].
//! - **Time** ([`AuditEntry::at_unix_ms`]) is the entry znode's `ctime`, stamped by the
//!   ZooKeeper leader's clock when the `multi` is applied; it is read back from the znode's
//!   `Stat` (the time field of the stored line is the writing process's clock, for people
//!   reading it with `zkCli.sh`, and is not what readers report). `prune` compares `ctime`.
//! - **Upgrade in place.** `<root>/audit` is created on connect; a subject's directory on its
//!   first write: a `multi` that fails on the entry's create with `NoNode` (nothing written)
//!   makes the directory and is sent again. A store written by an older version thus starts
//!   its ledger with its first write after the upgrade.
//! - **Reads.** `subjects`: `getChildren(<root>/audit)` and an `exists` per subject (pipelined),
//!   keeping those with a child. `entries`: `getChildren` of the subject, sorted and cut to the
//!   page in Rust, then a `getData` per entry of the page (pipelined). `prune`: per subject,
//!   `getChildren`, an `exists` per entry and a `delete` per old one (pipelined). Names that
//!   are not 10 digits, lines [`audit::decode_record`] refuses and subjects that are no
//!   namespace name are [`StoreError::Corrupt`].
//! - **Limit: `jute.maxbuffer`.** `getChildren` answers a subject's whole list of names in one
//!   reply, and every page of `entries` (and `prune`) reads it again. Each name costs 14 bytes
//!   of the reply (10 digits and a 4-byte length), so a subject of more than about 74,000
//!   entries makes a reply above ZooKeeper's default `jute.maxbuffer` of 1 MiB (0xfffff
//!   bytes). ZooKeeper 3.8.0 sends it anyway and this module's client reads it (measured: a
//!   listing of 400,000 entries, 5.6 MB, answered in one reply), but Java clients (`zkCli.sh`,
//!   Curator, ZooInspector) refuse a reply above their own `jute.maxbuffer`, and each page
//!   then costs a listing of the whole subject. Keep subjects below that with retention
//!   ([`AuditLog::prune`]), or raise `jute.maxbuffer` for the Java tools.
//! - Cost: none in round trips: a `multi` replaces the `setData` that was sent anyway (one
//!   more failed `multi` and two creates the first time a subject is written).
//!
//! ## Operations relied on (ZooKeeper 3.5 or later)
//!
//! - `ensure_namespace`: `create` (persistent); on `NodeExists` the record is read and the specs
//!   compared (`ops::ensure`): created once, the losers of a race see the winner's record.
//! - `reserve`, `give_back` and `advance`: compare-and-swap on the znode's data version:
//!   `getData` returns the record and its `Stat.version` together, the new state is computed
//!   in Rust (`ops::reserve`, `ops::give_back`, `ops::advance`) and written with
//!   `setData(path, new, version)` in a `multi` with the audit entry's create (above), which
//!   ZooKeeper applies only if the version is still the one read. On `BadVersion`
//!   (another node wrote in between) the record is read again and the operation recomputed,
//!   at once for the first few conflicts, then after a random pause (at most 64 ms); after
//!   [`MAX_CONFLICTS`] it gives up with [`StoreError::Unavailable`]. The last written state
//!   and version are cached per namespace, so a reservation is normally one round trip; a
//!   decision that writes nothing (a refused `give_back`, `Exhausted`) is never taken on cached
//!   data.
//! - `state`: `getData`; `list`: `getChildren` of `<root>/namespaces` and a `getData` per
//!   child (pipelined). Reads are served by the server the session is connected to, which may
//!   lag the leader (ZooKeeper's sequential consistency, not linearizable reads): a `state` may
//!   be stale, which its contract allows. Every write is a compare-and-swap on a version, so a
//!   stale read costs a conflict, never a duplicate block.
//!
//! Within one `ZookeeperAuthority`, operations on the same namespace run one at a time (an async
//! mutex per namespace); conflicts come only from other processes
//! ([`ZookeeperAuthority::conflicts_retried`] counts them).
//!
//! ## Durability and exclusivity
//!
//! ZooKeeper acknowledges a write once a quorum of the ensemble has written it to its
//! transaction log and fsynced the log (`forceSync=yes`, the default; do not turn it off), and
//! the leader has applied it: on `Ok` the new watermark survives a crash of any minority of
//! servers (of the only server, standalone). Two `setData` calls on the same version cannot
//! both succeed, which is what makes blocks disjoint across nodes.
//!
//! ## Lost replies never hand out a block twice
//!
//! A write is never resent: a `setData` or `multi` that fails with a connection loss, an
//! expired session or the operation timeout is [`StoreError::Unavailable`] and drops the
//! namespace's cached state. (Reads, and `ensure_namespace`'s create, whose repetition finds the
//! first one's znode, are sent again after a connection loss, within the operation timeout.)
//! A write (a `multi` with its audit entry) whose reply was lost may have committed, entry and
//! all; every later write is conditional on the version it read, which the lost write changed
//! if it committed, so whichever lands second fails its check and is recomputed from the
//! first: the possibly granted block is burned (and recorded as granted).
//!
//! Calls wait for the session to be connected before they hand the library a request, because
//! the library keeps a request it was given while disconnected and sends it once reconnected,
//! after its caller gave up. A write handed over in the instant the connection died (before the
//! library noticed) can still go out that way, up to 7/5 of the session timeout later (then the
//! library gives the session up and fails it); it is a compare-and-swap like any other, so it
//! lands only if nothing was written since, and its block is then burned.
//!
//! ## Sessions, timeouts and reconnection
//!
//! The authority holds one ZooKeeper session ([`ZookeeperConfig::session_timeout`]) for its
//! reads and writes; the client library reconnects it by itself after a connection loss (to
//! any server of the connect string), and if the session expired (the ensemble was out of reach
//! for longer than its timeout) the next call opens a new one. Sessions carry no state of the
//! watermarks, so losing one loses nothing. Every call, connecting and waiting behind other
//! operations on the namespace included, is bounded by [`ZookeeperConfig::op_timeout`].
//!
//! ## Worker leases ([`WorkerLeases`])
//!
//! Expiry is judged by ZooKeeper's clock alone: a lease is live while the EPHEMERAL znode
//! `live/<worker>` exists, and ZooKeeper deletes an ephemeral znode when the session that
//! created it ends. The durable part (token, holder, floor) is the persistent `workers/<worker>`,
//! and the group's layout and last token the persistent group znode.
//!
//! - **A session per lease, whose timeout is the TTL.** Each acquired lease gets a ZooKeeper
//!   session of its own, asked for with the lease's TTL as its session timeout; the server
//!   clamps it to its `minSessionTimeout`..`maxSessionTimeout` (by default 2 and 20 ticks, 4 s
//!   and 40 s), and the timeout it granted is the lease's TTL ([`WorkerLease::ttl`]; it may be
//!   *below* the TTL asked for if the server's maximum is lower: the holder must renew within
//!   what it was granted). The session is *detached* and its connection closed right after each
//!   acquisition and renewal, so nothing pings it in between: if the holder stops renewing, the
//!   server expires it one TTL after the last renewal and deletes `live/<worker>`, which frees
//!   the worker id. (A session kept connected would be kept alive by the client library's pings
//!   even when the holder stopped renewing, and could not expire by itself.)
//! - **acquire**: reads the group (its record and version, the worker records and the live
//!   znodes), runs [`plan_acquire`], then commits from the lease's new session one `multi`
//!   transaction: the audit entry (`leased`) created, the group record set at the version read
//!   (or created, with its two directories), the worker record set at the version read (or
//!   created), and the ephemeral `live/<worker>` created. Concurrent acquisitions conflict on the group's version (every
//!   acquisition changes it) or on the live znode (`NodeExists`), and retry from a fresh read;
//!   so at most one live lease per worker id, and tokens strictly increase per group.
//! - **renew**: reads the worker record (its token must be the lease's, else
//!   [`LeaseError::Superseded`], nothing written) and `live/<worker>`. If the znode is there
//!   and owned by the lease's session, the session is resumed (a reconnection with its id and
//!   password, which restarts its timeout at the server) and the floor raised with a `multi`
//!   (version check of `live/<worker>`, `setData` of the worker record at the version read). If
//!   the session expired (the lease lapsed) but nobody acquired the worker id since (the record
//!   still names the lease: token and holder), the lease is re-established: a new session, and
//!   one `multi` that writes a `leased` ledger entry, checks the worker record's version, sets
//!   the floor, deletes the stale live znode if it is still there (only ever the lease's own:
//!   one of another token or holder is damage, and nothing is written) and creates the new one.
//!   Either way the renewal succeeds only while the record names the lease, as
//!   [`WorkerLeases::renew`] requires: a store that lost its records and granted token 1 again
//!   to another node is never taken over.
//! - **release**: one `multi`: the worker record set with the given floor at the version read
//!   (its token checked first), and `live/<worker>` deleted at its version. The lease's session
//!   then holds nothing and expires after its TTL.
//! - A lease whose acquisition failed after the commit (lost reply) leaves a live znode of a
//!   session nobody resumes: it vanishes one TTL later, and until then the worker id is held.
//! - The sessions of the leases are known only to the `ZookeeperAuthority` that acquired them;
//!   renewing through another one re-establishes the lease under a new session (the old live
//!   znode, of the same token, is replaced).
//!
//! ## What it does not do
//!
//! TLS, SASL or digest authentication and ACLs (znodes are created world-writable), chroot in
//! the connect string (use `root`), deleting namespaces, watches, and paging `list` (one
//! `getChildren`; fine for tens of thousands of namespaces). Reads are not preceded by `sync`.

use crate::audit::{self, Advance, Advanced, AuditEntry, AuditEvent, AuditLog};
pub use crate::config::ZookeeperConfig;
use crate::lease::{
    check_current, is_current, plan_acquire, superseded, GroupRecord, LeaseError, LeaseRequest,
    WorkerLease, WorkerLeases, WorkerSlot,
};
use crate::{ops, Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Backoff, Block, NamespaceName, SequenceSpec, Width};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client::{
    Acls, Client, CreateMode, CreateOptions, Error as ZkError, MultiWriteError, MultiWriteResult,
    SessionInfo, SessionState, Stat,
};

const KIND: &str = "zookeeper";
/// The first field of a namespace record; the version of the record format.
const NS_FORMAT: &str = "idmint.ns/v1";
const GROUP_FORMAT: &str = "idmint.group/v1";
const WORKER_FORMAT: &str = "idmint.worker/v1";
const LIVE_FORMAT: &str = "idmint.live/v1";
pub use crate::ops::MAX_CONFLICTS;
/// The pauses before a read that failed with a connection loss, or a session that could not
/// be opened, is tried again (within the operation's deadline): random and exponential, from
/// 20 ms to 400 ms, so a reconnecting client is not flooded and a brief loss costs little.
fn retry_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(20), Duration::from_millis(400))
}

const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());
const EPHEMERAL: CreateOptions<'static> = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
const SEQUENTIAL: CreateOptions<'static> =
    CreateMode::PersistentSequential.with_acls(Acls::anyone_all());

/// The cached result of the last write of a namespace by this authority.
#[derive(Debug, Clone)]
struct Cached {
    state: NamespaceState,
    version: i32,
}

/// Per namespace: serializes this authority's operations on it and holds its cached record.
type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// The session of a lease this authority acquired or re-established.
#[derive(Debug, Clone)]
struct LeaseSession {
    token: u64,
    session: SessionInfo,
}

/// The ZooKeeper authority. Cheap to share behind an `Arc`; holds one ZooKeeper session (whose
/// connection multiplexes concurrent calls) and, per lease it holds, that lease's session's id.
pub struct ZookeeperAuthority {
    config: ZookeeperConfig,
    connect_string: String,
    /// The current session; replaced by the next call once it is expired or closed.
    client: tokio::sync::Mutex<Option<Client>>,
    /// `<root>/namespaces`.
    ns_dir: String,
    /// `<root>/leases`.
    lease_dir: String,
    /// `<root>/audit`.
    audit_dir: String,
    slots: Mutex<HashMap<NamespaceName, Slot>>,
    lease_sessions: Mutex<HashMap<(NamespaceName, u64), LeaseSession>>,
    conflicts: AtomicU64,
}

impl fmt::Debug for ZookeeperAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperAuthority")
            .field("servers", &self.config.servers)
            .field("root", &self.config.root)
            .field("op_timeout", &self.config.op_timeout)
            .finish_non_exhaustive()
    }
}

/// When an operation must be over, and the operation timeout (for messages).
type Deadline = (Instant, Duration);

/// The outcome of a write that may lose a race: `Ok(None)` is a conflict (retry from a fresh
/// read).
type Attempt<T> = Result<Option<T>, StoreError>;

impl ZookeeperAuthority {
    /// Connects to the ensemble, opens a session and creates the root znode and its
    /// directories if absent, all within `config.op_timeout`.
    ///
    /// [`StoreError::InvalidSetup`] if no server is configured, a server or the root is
    /// malformed, or a timeout is zero; [`StoreError::Unavailable`] if ZooKeeper does not answer.
    pub async fn connect(config: ZookeeperConfig) -> Result<Self, StoreError> {
        let setup = |message: String| Err(StoreError::InvalidSetup { message });
        if config.servers.is_empty() {
            return setup("no ZooKeeper server configured".to_owned());
        }
        for server in &config.servers {
            if let Err(why) = crate::config::check_server(server) {
                return setup(format!("ZooKeeper server {server:?}: {why}"));
            }
        }
        if let Err(why) = crate::config::check_root(&config.root) {
            return setup(format!("ZooKeeper root {:?}: {why}", config.root));
        }
        if config.op_timeout.is_zero() || config.session_timeout.is_zero() {
            return setup("op_timeout and session_timeout must be above zero".to_owned());
        }
        let authority = ZookeeperAuthority {
            connect_string: config.connect_string(),
            ns_dir: format!("{}/namespaces", config.root),
            lease_dir: format!("{}/leases", config.root),
            audit_dir: format!("{}/audit", config.root),
            config,
            client: tokio::sync::Mutex::new(None),
            slots: Mutex::new(HashMap::new()),
            lease_sessions: Mutex::new(HashMap::new()),
            conflicts: AtomicU64::new(0),
        };
        let deadline = authority.deadline();
        authority.ensure_dirs(deadline).await?;
        Ok(authority)
    }

    /// How many compare-and-swap conflicts (another writer between this authority's read and
    /// its write) were retried since it was created.
    pub fn conflicts_retried(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// The config it was created with.
    pub fn config(&self) -> &ZookeeperConfig {
        &self.config
    }

    fn deadline(&self) -> Deadline {
        (
            Instant::now() + self.config.op_timeout,
            self.config.op_timeout,
        )
    }

    fn ns_path(&self, name: &NamespaceName) -> String {
        format!("{}/{}", self.ns_dir, name.as_str())
    }

    /// `<root>/incarnation`: the store's incarnation ([`crate::incarnation`]).
    fn incarnation_path(&self) -> String {
        format!("{}/incarnation", self.config.root)
    }

    fn group_path(&self, group: &NamespaceName) -> String {
        format!("{}/{}", self.lease_dir, group.as_str())
    }

    /// `<root>/audit/<subject>`: the parent of the subject's entries.
    fn audit_subject_dir(&self, subject: &NamespaceName) -> String {
        format!("{}/{}", self.audit_dir, subject.as_str())
    }

    /// Creates `<root>/audit` and `<root>/audit/<subject>` if absent (an entry's first write,
    /// or a store written by a version without the ledger).
    async fn ensure_audit_dir(
        &self,
        subject: &NamespaceName,
        deadline: Deadline,
    ) -> Result<(), StoreError> {
        let client = self.client(deadline).await?;
        for path in [self.audit_dir.clone(), self.audit_subject_dir(subject)] {
            let what = format!("creating {path}");
            match timed(deadline, &what, client.create(&path, b"", &PERSISTENT)).await? {
                Ok(_) | Err(ZkError::NodeExists) => {}
                // The root itself vanished (the ensemble was wiped): make the directories
                // again, so the next attempt reaches the checks that refuse an emptied store
                // instead of failing here forever.
                Err(ZkError::NoNode) => return self.ensure_dirs(deadline).await,
                Err(e) => return Err(failed(&what, &e)),
            }
        }
        Ok(())
    }

    /// Adds the creation of `subject`'s next audit entry (persistent sequential) to `multi`.
    fn add_audit_entry(
        &self,
        multi: &mut zookeeper_client::MultiWriter<'_>,
        subject: &NamespaceName,
        event: &AuditEvent,
    ) -> Result<(), ZkError> {
        self.add_audit_entry_by(multi, subject, event, audit::holder())
    }

    /// [`Self::add_audit_entry`], granted to `holder` (a worker lease's).
    fn add_audit_entry_by(
        &self,
        multi: &mut zookeeper_client::MultiWriter<'_>,
        subject: &NamespaceName,
        event: &AuditEvent,
        holder: &str,
    ) -> Result<(), ZkError> {
        let prefix = format!("{}/", self.audit_subject_dir(subject));
        let record = audit::encode_record(audit::now_unix_ms(), event, holder);
        multi.add_create(&prefix, record.as_bytes(), &SEQUENTIAL)
    }

    /// Creates `<root>` (and its parents), `<root>/namespaces`, `<root>/leases` and
    /// `<root>/audit` if absent.
    async fn ensure_dirs(&self, deadline: Deadline) -> Result<(), StoreError> {
        let client = self.client(deadline).await?;
        let root = &self.config.root;
        let mut paths: Vec<String> = Vec::new();
        for (i, _) in root.match_indices('/').skip(1) {
            paths.push(root[..i].to_owned());
        }
        paths.push(root.clone());
        paths.push(self.ns_dir.clone());
        paths.push(self.lease_dir.clone());
        paths.push(self.audit_dir.clone());
        for path in paths {
            match timed(
                deadline,
                "creating the root znodes",
                client.create(&path, b"", &PERSISTENT),
            )
            .await?
            {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) => return Err(failed(&format!("creating {path}"), &e)),
            }
        }
        Ok(())
    }

    /// The current session's client, connected, or a new session if there is none or it
    /// ended.
    ///
    /// While the library reconnects, this waits (within the deadline) until it is connected
    /// again rather than hand it a request: the library would keep such a request queued and
    /// send it once reconnected, long after its caller gave up, so a write made during an
    /// outage would land after it (still a compare-and-swap, so never a duplicate block, but a
    /// burned one and a watermark that moved while the caller was told nothing happened).
    ///
    /// A session that ended (expired, or given up by the library after failing to reconnect
    /// for 7/5 of its timeout, which also fails every request still queued in it) is replaced
    /// by a new one; opening one that fails at once (no server reachable) is tried again until
    /// the deadline, so every failure takes the operation timeout, as a stalled server does.
    async fn client(&self, deadline: Deadline) -> Result<Client, StoreError> {
        let mut retries = retry_backoff();
        loop {
            let client = match self.session(deadline).await {
                Ok(client) => client,
                Err(e) => {
                    let pause = retries.delay();
                    if Instant::now() + pause >= deadline.0 {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let mut watcher = client.state_watcher();
            loop {
                let state = watcher.state();
                if state == SessionState::SyncConnected {
                    return Ok(client);
                }
                if state.is_terminated() {
                    break; // replaced by `session`
                }
                if tokio::time::timeout_at(deadline.0, watcher.changed())
                    .await
                    .is_err()
                {
                    return Err(self.timed_out("waiting for the connection to ZooKeeper"));
                }
            }
        }
    }

    /// The current session's client (connected or not), or a new session if there is none or
    /// it ended.
    async fn session(&self, deadline: Deadline) -> Result<Client, StoreError> {
        let mut current = match tokio::time::timeout_at(deadline.0, self.client.lock()).await {
            Ok(guard) => guard,
            Err(_) => return Err(self.timed_out("waiting for the ZooKeeper session")),
        };
        if let Some(client) = current.as_ref() {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
        }
        *current = None;
        let client = open_session(
            &self.connect_string,
            self.config.session_timeout,
            None,
            false,
            deadline,
        )
        .await?;
        *current = Some(client.clone());
        Ok(client)
    }

    fn timed_out(&self, what: &str) -> StoreError {
        unavailable(format!(
            "{what}: no answer within {:?}",
            self.config.op_timeout
        ))
    }

    /// The namespace's record and its version, read now.
    async fn read(
        &self,
        name: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Option<Cached>, StoreError> {
        let path = self.ns_path(name);
        let what = format!("reading namespace {name}");
        let mut retries = retry_backoff();
        loop {
            let client = self.client(deadline).await?;
            match timed(deadline, &what, client.get_data(&path)).await? {
                Ok((data, stat)) => {
                    return Ok(Some(Cached {
                        state: decode_ns(name, &data)?,
                        version: stat.version,
                    }))
                }
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) if transient(&e) => retry_pause(deadline, &mut retries).await,
                Err(e) => return Err(failed(&what, &e)),
            }
        }
    }

    fn slot(&self, name: &NamespaceName) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.entry(name.clone()).or_default().clone()
    }

    /// Forgets the slot of a namespace that does not exist, unless another task uses it.
    fn forget_slot(&self, name: &NamespaceName) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if slots
            .get(name)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            slots.remove(name);
        }
    }

    /// The read-compute-CAS loop of `reserve` and `give_back`.
    async fn update<T>(
        &self,
        name: &NamespaceName,
        decide: impl Fn(&NamespaceState) -> Result<ops::Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let deadline = self.deadline();
        let result = {
            let slot = self.slot(name);
            let outcome = match tokio::time::timeout_at(deadline.0, slot.lock()).await {
                Ok(mut cache) => self.update_locked(name, &mut cache, deadline, decide).await,
                Err(_) => Err(unavailable(format!(
                    "namespace {name}: waited longer than {:?} behind earlier operations",
                    self.config.op_timeout
                ))),
            };
            outcome
        };
        if matches!(result, Err(StoreError::UnknownNamespace { .. })) {
            self.forget_slot(name);
        }
        result
    }

    async fn update_locked<T>(
        &self,
        name: &NamespaceName,
        cache: &mut Option<Cached>,
        deadline: Deadline,
        decide: impl Fn(&NamespaceState) -> Result<ops::Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let unknown = || StoreError::UnknownNamespace { name: name.clone() };
        let path = self.ns_path(name);
        let what = format!("updating namespace {name}");
        // Taken out: an error below leaves the cache empty, so the next call reads afresh.
        let mut current: Option<(Cached, bool)> = cache.take().map(|c| (c, false));
        let mut backoff = ops::conflict_backoff();
        let mut made_dir = false;
        loop {
            let (record, fresh) = match current.take() {
                Some(known) => known,
                None => (self.read(name, deadline).await?.ok_or_else(unknown)?, true),
            };
            let (new_state, event, answer) = match decide(&record.state) {
                // Only write decisions may rest on cached data (the CAS checks them); a
                // refusal or an error is confirmed on a fresh read.
                Ok(ops::Decision::Keep(_)) | Err(_) if !fresh => continue,
                Err(e) => {
                    *cache = Some(record);
                    return Err(e);
                }
                Ok(ops::Decision::Keep(answer)) => {
                    *cache = Some(record);
                    return Ok(answer);
                }
                Ok(ops::Decision::Write(new_state, event, answer)) => (new_state, event, answer),
            };
            let client = self.client(deadline).await?;
            let data = encode_ns(&new_state);
            // Operation 0: the compare-and-swap; operation 1: the entry.
            let mut multi = client.new_multi_writer();
            multi
                .add_set_data(&path, data.as_bytes(), Some(record.version))
                .and_then(|()| self.add_audit_entry(&mut multi, name, &event))
                .map_err(|e| failed("building an update", &e))?;
            match timed(deadline, &what, multi.commit()).await? {
                Ok(results) => {
                    let Some(MultiWriteResult::SetData { stat }) = results.first() else {
                        return Err(unavailable(format!(
                            "{what}: ZooKeeper answered a transaction without its results"
                        )));
                    };
                    *cache = Some(Cached {
                        state: new_state,
                        version: stat.version,
                    });
                    return Ok(answer);
                }
                // The subject's audit directory is missing (a store written before the
                // ledger): make it, then go again (nothing was written).
                Err(MultiWriteError::OperationFailed {
                    index: 1,
                    source: ZkError::NoNode,
                }) if !made_dir => {
                    made_dir = true;
                    self.ensure_audit_dir(name, deadline).await?;
                    current = Some((record, fresh));
                    continue;
                }
                // Another writer came first (or the namespace is gone): go again from a read.
                Err(MultiWriteError::OperationFailed {
                    index: 0,
                    source: ZkError::BadVersion | ZkError::NoNode,
                }) => {}
                Err(MultiWriteError::OperationFailed { source, .. })
                | Err(MultiWriteError::RequestFailed { source }) => {
                    return Err(failed(&what, &source))
                }
            }
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            let Some(pause) = backoff.next() else {
                return Err(unavailable(format!(
                    "namespace {name}: gave up after {MAX_CONFLICTS} conflicting writes by \
                     other nodes; retry later"
                )));
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }

    // ----- leases -----

    /// The group as stored now: `None` if never acquired. Read again after a connection loss.
    async fn read_group(
        &self,
        group: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Option<GroupView>, StoreError> {
        let mut retries = retry_backoff();
        loop {
            match self.read_group_once(group, deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(view) => return Ok(view),
            }
        }
    }

    async fn read_group_once(
        &self,
        group: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Option<GroupView>, Fail> {
        let client = self.client(deadline).await?;
        let path = self.group_path(group);
        let what = format!("reading lease group {group}");
        let (data, stat) = match timed(deadline, &what, client.get_data(&path)).await? {
            Ok(found) => found,
            Err(ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(fail(&what, e)),
        };
        let record = decode_group(group, &data)?;
        let workers_dir = format!("{path}/workers");
        let live_dir = format!("{path}/live");
        // Sent at once, answered in order.
        let workers = client.list_children(&workers_dir);
        let live = client.list_children(&live_dir);
        let workers = timed(deadline, &what, workers)
            .await?
            .map_err(|e| fail(&what, e))?;
        let live = timed(deadline, &what, live)
            .await?
            .map_err(|e| fail(&what, e))?;
        let worker_reads: Vec<_> = workers
            .iter()
            .map(|w| (w.clone(), client.get_data(&format!("{workers_dir}/{w}"))))
            .collect();
        let live_reads: Vec<_> = live
            .iter()
            .map(|w| (w.clone(), client.get_data(&format!("{live_dir}/{w}"))))
            .collect();
        let mut view = GroupView {
            record,
            version: stat.version,
            workers: HashMap::new(),
            live: HashMap::new(),
        };
        for (child, read) in worker_reads {
            let worker = worker_id(group, &child)?;
            match timed(deadline, &what, read).await? {
                Ok((data, stat)) => {
                    let slot = decode_worker(group, worker, &data)?;
                    view.workers.insert(worker, (slot, stat.version));
                }
                // Worker records are never deleted; a vanished one is a concurrent edit by hand.
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(&what, e)),
            }
        }
        for (child, read) in live_reads {
            let worker = worker_id(group, &child)?;
            match timed(deadline, &what, read).await? {
                Ok((data, stat)) => {
                    let live = decode_live(group, worker, &data)?;
                    view.live.insert(worker, (live, stat));
                }
                // Expired in between: free.
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(&what, e)),
            }
        }
        Ok(Some(view))
    }

    /// The worker record of `lease` with its version, and its live znode (if any). Read again
    /// after a connection loss.
    async fn read_worker(
        &self,
        lease: &WorkerLease,
        deadline: Deadline,
    ) -> Result<WorkerRead, StoreError> {
        let mut retries = retry_backoff();
        loop {
            match self.read_worker_once(lease, deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(read) => return Ok(read),
            }
        }
    }

    async fn read_worker_once(
        &self,
        lease: &WorkerLease,
        deadline: Deadline,
    ) -> Result<WorkerRead, Fail> {
        let client = self.client(deadline).await?;
        let (worker_path, live_path) = self.worker_paths(&lease.group, lease.worker);
        let what = format!("reading worker {} of group {}", lease.worker, lease.group);
        let record = client.get_data(&worker_path);
        let live = client.get_data(&live_path);
        let record = match timed(deadline, &what, record).await? {
            Ok((data, stat)) => Some((
                decode_worker(&lease.group, lease.worker, &data)?,
                stat.version,
            )),
            Err(ZkError::NoNode) => None,
            Err(e) => return Err(fail(&what, e)),
        };
        let live = match timed(deadline, &what, live).await? {
            Ok((data, stat)) => Some((decode_live(&lease.group, lease.worker, &data)?, stat)),
            Err(ZkError::NoNode) => None,
            Err(e) => return Err(fail(&what, e)),
        };
        Ok((record, live))
    }

    fn worker_paths(&self, group: &NamespaceName, worker: u64) -> (String, String) {
        let path = self.group_path(group);
        (
            format!("{path}/workers/{worker}"),
            format!("{path}/live/{worker}"),
        )
    }

    fn lease_session(&self, group: &NamespaceName, worker: u64, token: u64) -> Option<SessionInfo> {
        let sessions = self
            .lease_sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions
            .get(&(group.clone(), worker))
            .filter(|s| s.token == token)
            .map(|s| s.session.clone())
    }

    fn remember_session(&self, group: &NamespaceName, worker: u64, token: u64, client: &Client) {
        let mut sessions = self
            .lease_sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.insert(
            (group.clone(), worker),
            LeaseSession {
                token,
                session: client.session().clone(),
            },
        );
    }

    fn forget_session(&self, group: &NamespaceName, worker: u64) {
        let mut sessions = self
            .lease_sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.remove(&(group.clone(), worker));
    }

    /// A new detached session for a lease of `ttl`.
    async fn lease_client(&self, ttl: Duration, deadline: Deadline) -> Result<Client, StoreError> {
        open_session(&self.connect_string, ttl, None, true, deadline).await
    }

    /// One acquisition attempt on a fresh read; `Ok(None)` on a conflict.
    async fn try_acquire(
        &self,
        request: &LeaseRequest,
        session: &mut Option<Client>,
        deadline: Deadline,
    ) -> Result<Option<WorkerLease>, LeaseError> {
        let view = self.read_group(&request.group, deadline).await?;
        let slots = view.as_ref().map_or_else(Vec::new, GroupView::slots);
        let grant = plan_acquire(request, view.as_ref().map(|v| &v.record), &slots)?;
        let client = match session {
            Some(client) => client.clone(),
            None => {
                let client = self.lease_client(request.ttl, deadline).await?;
                *session = Some(client.clone());
                client
            }
        };
        let ttl = client.session_timeout();
        let group_path = self.group_path(&request.group);
        let (worker_path, live_path) = self.worker_paths(&request.group, grant.worker);
        let worker = WorkerSlot {
            worker: grant.worker,
            token: grant.token,
            holder: request.holder.clone(),
            floor_unix_ms: grant.floor_unix_ms,
            expires_in: None,
        };
        let live = Live {
            token: grant.token,
            ttl,
            holder: request.holder.clone(),
        };
        let group_data = encode_group(&grant.group);
        let worker_data = encode_worker(&worker);
        let live_data = encode_live(&live);
        let event = AuditEvent::Leased {
            worker: grant.worker,
            token: grant.token,
        };
        // Operation 0: the entry; then the group, the worker record and the live znode.
        let mut multi = client.new_multi_writer();
        let built = (|| {
            self.add_audit_entry_by(&mut multi, &request.group, &event, &request.holder)?;
            match &view {
                Some(v) => {
                    multi.add_set_data(&group_path, group_data.as_bytes(), Some(v.version))?
                }
                None => {
                    multi.add_create(&group_path, group_data.as_bytes(), &PERSISTENT)?;
                    multi.add_create(&format!("{group_path}/workers"), b"", &PERSISTENT)?;
                    multi.add_create(&format!("{group_path}/live"), b"", &PERSISTENT)?;
                }
            }
            match view.as_ref().and_then(|v| v.workers.get(&grant.worker)) {
                Some((_, version)) => {
                    multi.add_set_data(&worker_path, worker_data.as_bytes(), Some(*version))?
                }
                None => multi.add_create(&worker_path, worker_data.as_bytes(), &PERSISTENT)?,
            }
            multi.add_create(&live_path, live_data.as_bytes(), &EPHEMERAL)
        })();
        built.map_err(|e| failed("building a lease transaction", &e))?;
        let what = format!("acquiring a lease of group {}", request.group);
        let result = timed(deadline, &what, multi.commit()).await?;
        if let Err(MultiWriteError::OperationFailed {
            index: 0,
            source: ZkError::NoNode,
        }) = result
        {
            // The group's audit directory is missing: make it and go again.
            self.ensure_audit_dir(&request.group, deadline).await?;
            return Ok(None);
        }
        if committed(&what, result)?.is_none() {
            return Ok(None);
        }
        self.remember_session(&request.group, grant.worker, grant.token, &client);
        Ok(Some(WorkerLease {
            group: request.group.clone(),
            worker: grant.worker,
            token: grant.token,
            floor_unix_ms: grant.floor_unix_ms,
            ttl,
            holder: request.holder.clone(),
        }))
    }

    /// One renewal attempt on a fresh read; `Ok(None)` on a conflict.
    async fn try_renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
        deadline: Deadline,
    ) -> Result<Option<WorkerLease>, LeaseError> {
        let (record, live) = self.read_worker(lease, deadline).await?;
        let (slot, version) = match record {
            Some((slot, version)) if is_current(lease, &slot) => (slot, version),
            other => {
                self.forget_session(&lease.group, lease.worker);
                return Err(superseded(lease, other.as_ref().map(|(s, _)| s)));
            }
        };
        let floor = slot.floor_unix_ms.max(floor_unix_ms);
        let renewed = WorkerLease {
            floor_unix_ms: floor,
            ..lease.clone()
        };
        let (worker_path, live_path) = self.worker_paths(&lease.group, lease.worker);
        let new_record = encode_worker(&WorkerSlot {
            floor_unix_ms: floor,
            ..slot.clone()
        });
        let what = format!("renewing worker {} of group {}", lease.worker, lease.group);
        if let Some((live, _)) = &live {
            if live.token != lease.token || live.holder != lease.holder {
                // Never another holder's live znode: the record names this lease, so this is
                // damage, and nothing is written (in particular, that znode is not deleted).
                return Err(StoreError::Corrupt {
                    message: format!(
                        "ZooKeeper lease group {}: worker {} is recorded with token {} of {} but \
                         its live lease has token {} of {}",
                        lease.group,
                        lease.worker,
                        lease.token,
                        lease.holder,
                        live.token,
                        live.holder
                    ),
                }
                .into());
            }
        }
        // The lease's own session, if it still exists: resuming it restarts its timeout.
        let known = self.lease_session(&lease.group, lease.worker, lease.token);
        if let (Some((_, stat)), Some(session)) = (&live, known) {
            if stat.ephemeral_owner == session.id().0 {
                // If it lapsed, it is re-established below (the stale znode goes with the
                // session).
                if let Ok(()) =
                    resume_session(&self.connect_string, session, lease.ttl, deadline).await
                {
                    {
                        let client = self.client(deadline).await?;
                        let mut multi = client.new_multi_writer();
                        multi
                            .add_check_version(&live_path, stat.version)
                            .and_then(|()| {
                                multi.add_set_data(
                                    &worker_path,
                                    new_record.as_bytes(),
                                    Some(version),
                                )
                            })
                            .map_err(|e| failed("building a renewal", &e))?;
                        let done = committed(&what, timed(deadline, &what, multi.commit()).await?)?;
                        return Ok(done.map(|_| renewed));
                    }
                }
            }
        }
        // The lease lapsed (or its session is not this authority's), and the record still
        // names it: re-establish it under a new session, with a ledger entry. The live znode
        // deleted here, if any, is this lease's own (checked above).
        let client = self.lease_client(lease.ttl, deadline).await?;
        let live_data = encode_live(&Live {
            token: lease.token,
            ttl: client.session_timeout(),
            holder: lease.holder.clone(),
        });
        let event = AuditEvent::Leased {
            worker: lease.worker,
            token: lease.token,
        };
        let mut multi = client.new_multi_writer();
        let built = (|| {
            self.add_audit_entry_by(&mut multi, &lease.group, &event, &lease.holder)?;
            multi.add_set_data(&worker_path, new_record.as_bytes(), Some(version))?;
            if let Some((_, stat)) = &live {
                multi.add_delete(&live_path, Some(stat.version))?;
            }
            multi.add_create(&live_path, live_data.as_bytes(), &EPHEMERAL)
        })();
        built.map_err(|e| failed("building a renewal", &e))?;
        let result = timed(deadline, &what, multi.commit()).await?;
        if let Err(MultiWriteError::OperationFailed {
            index: 0,
            source: ZkError::NoNode,
        }) = result
        {
            self.ensure_audit_dir(&lease.group, deadline).await?;
            return Ok(None);
        }
        if committed(&what, result)?.is_none() {
            return Ok(None);
        }
        self.remember_session(&lease.group, lease.worker, lease.token, &client);
        Ok(Some(renewed))
    }

    /// One release attempt on a fresh read; `Ok(None)` on a conflict.
    async fn try_release(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
        deadline: Deadline,
    ) -> Result<Option<()>, LeaseError> {
        let (record, live) = self.read_worker(lease, deadline).await?;
        let current = record.as_ref().map(|(s, _)| s);
        if let Err(e) = check_current(lease, current) {
            self.forget_session(&lease.group, lease.worker);
            return Err(e);
        }
        let Some((slot, version)) = record else {
            return Err(superseded(lease, None));
        };
        let (worker_path, live_path) = self.worker_paths(&lease.group, lease.worker);
        let new_record = encode_worker(&WorkerSlot {
            floor_unix_ms,
            ..slot
        });
        let client = self.client(deadline).await?;
        let mut multi = client.new_multi_writer();
        let built = (|| {
            multi.add_set_data(&worker_path, new_record.as_bytes(), Some(version))?;
            match &live {
                Some((live, stat)) if live.token == lease.token && live.holder == lease.holder => {
                    multi.add_delete(&live_path, Some(stat.version))
                }
                _ => Ok(()),
            }
        })();
        built.map_err(|e| failed("building a release", &e))?;
        let what = format!("releasing worker {} of group {}", lease.worker, lease.group);
        let done = committed(&what, timed(deadline, &what, multi.commit()).await?)?;
        if done.is_some() {
            self.forget_session(&lease.group, lease.worker);
        }
        Ok(done.map(|_| ()))
    }

    /// Runs `attempt` until it does not conflict, at most [`MAX_CONFLICTS`] times.
    async fn retrying<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T, LeaseError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Option<T>, LeaseError>>,
    {
        let mut backoff = ops::conflict_backoff();
        loop {
            if let Some(done) = attempt().await? {
                return Ok(done);
            }
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            let Some(pause) = backoff.next() else {
                return Err(unavailable(format!(
                    "{what}: gave up after {MAX_CONFLICTS} conflicting writes by other nodes; \
                     retry later"
                ))
                .into());
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[async_trait]
impl Authority for ZookeeperAuthority {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
    }

    fn audit_log(&self) -> Option<&dyn AuditLog> {
        Some(self)
    }

    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        let deadline = self.deadline();
        let client = self.client(deadline).await?;
        let path = self.incarnation_path();
        let what = format!("reading {path}");
        match timed(deadline, &what, client.get_data(&path)).await? {
            Ok((data, _)) => decode_incarnation(&data).map(Some),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(failed(&what, &e)),
        }
    }

    /// One `create` (persistent): `NodeExists` means another node created it first.
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let deadline = self.deadline();
        let client = self.client(deadline).await?;
        let path = self.incarnation_path();
        let what = format!("creating {path}");
        let created = client.create(&path, candidate.as_str().as_bytes(), &PERSISTENT);
        match timed(deadline, &what, created).await? {
            Ok(_) | Err(ZkError::NodeExists) => {}
            // The root vanished: make it again (the incarnation goes into an empty store).
            Err(ZkError::NoNode) => {
                self.ensure_dirs(deadline).await?;
                let created = client.create(&path, candidate.as_str().as_bytes(), &PERSISTENT);
                match timed(deadline, &what, created).await? {
                    Ok(_) | Err(ZkError::NodeExists) => {}
                    Err(e) => return Err(failed(&what, &e)),
                }
            }
            Err(e) => return Err(failed(&what, &e)),
        }
        self.incarnation()
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                message: format!("{path} is missing right after it was created"),
            })
    }

    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        self.update(name, |state| ops::decide_advance(state, to, why))
            .await
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let deadline = self.deadline();
        let path = self.ns_path(name);
        let created = NamespaceState::new(name.clone(), spec);
        let data = encode_ns(&created);
        let what = format!("creating namespace {name}");
        // Sending the create again is harmless: a second one finds the first's znode and
        // compares specs.
        let mut remade_dirs = false;
        let mut retries = retry_backoff();
        loop {
            let client = self.client(deadline).await?;
            match timed(
                deadline,
                &what,
                client.create(&path, data.as_bytes(), &PERSISTENT),
            )
            .await?
            {
                Ok(_) => return Ok(created),
                Err(ZkError::NodeExists) => break,
                // `<root>/namespaces` is gone (removed by hand): make it again, once.
                Err(ZkError::NoNode) if !remade_dirs => {
                    remade_dirs = true;
                    self.ensure_dirs(deadline).await?;
                }
                Err(e) if transient(&e) => retry_pause(deadline, &mut retries).await,
                Err(e) => return Err(failed(&what, &e)),
            }
        }
        let existing = self.read(name, deadline).await?.ok_or_else(|| {
            unavailable(format!(
                "namespace {name}: ZooKeeper reported the znode both present and absent"
            ))
        })?;
        match ops::ensure(name, Some(&existing.state), spec)? {
            None => Ok(existing.state),
            // ops::ensure only creates when nothing exists.
            Some(_) => Err(unavailable(format!(
                "namespace {name}: inconsistent ensure"
            ))),
        }
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.update(name, |state| ops::decide_reserve(state, count))
            .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        Ok(self.read(name, self.deadline()).await?.map(|c| c.state))
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let deadline = self.deadline();
        let mut retries = retry_backoff();
        loop {
            match self.list_once(deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(all) => return Ok(all),
            }
        }
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.update(name, |state| ops::decide_give_back(state, tail))
            .await
    }
}

impl ZookeeperAuthority {
    /// One try of `list`.
    async fn list_once(&self, deadline: Deadline) -> Result<Vec<NamespaceState>, Fail> {
        let client = self.client(deadline).await?;
        let what = "listing namespaces";
        let children = timed(deadline, what, client.list_children(&self.ns_dir))
            .await?
            .map_err(|e| fail(what, e))?;
        let mut reads = Vec::with_capacity(children.len());
        for child in children {
            let name = NamespaceName::new(&child).map_err(|e| StoreError::Corrupt {
                message: format!("znode {}/{child} is not a namespace: {e}", self.ns_dir),
            })?;
            // Sent now, all at once; answered in order.
            let read = client.get_data(&self.ns_path(&name));
            reads.push((name, read));
        }
        let mut all = Vec::with_capacity(reads.len());
        for (name, read) in reads {
            match timed(deadline, what, read).await? {
                Ok((data, _)) => all.push(decode_ns(&name, &data)?),
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(what, e)),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }
}

#[async_trait]
impl WorkerLeases for ZookeeperAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        // Invalid requests (no worker ids, a zero TTL, an id out of range) fail before any I/O.
        plan_acquire(request, None, &[])?;
        let deadline = self.deadline();
        // One lease session for all attempts; if none succeeds it expires after the TTL,
        // holding nothing.
        let session = tokio::sync::Mutex::new(None);
        let what = format!("acquiring a lease of group {}", request.group);
        self.retrying(&what, || async {
            let mut session = session.lock().await;
            self.try_acquire(request, &mut session, deadline).await
        })
        .await
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let deadline = self.deadline();
        let what = format!("renewing worker {} of group {}", lease.worker, lease.group);
        self.retrying(&what, || self.try_renew(lease, floor_unix_ms, deadline))
            .await
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let deadline = self.deadline();
        let what = format!("releasing worker {} of group {}", lease.worker, lease.group);
        self.retrying(&what, || self.try_release(lease, floor_unix_ms, deadline))
            .await
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let view = self.read_group(group, self.deadline()).await?;
        Ok(view.map(|v| {
            let slots = v.slots();
            (v.record, slots)
        }))
    }
}

impl ZookeeperAuthority {
    /// Runs a read of the ledger until it does not fail with a lost connection.
    async fn audit_read<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
    where
        F: Fn(Deadline) -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        let deadline = self.deadline();
        let mut retries = retry_backoff();
        loop {
            match attempt(deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(done) => return Ok(done),
            }
        }
    }

    /// Every directory under `<root>/audit` (subjects, also those with no entry left).
    async fn audit_dirs(&self, deadline: Deadline) -> Result<Vec<NamespaceName>, Fail> {
        let client = self.client(deadline).await?;
        let what = "listing audit subjects";
        let children = match timed(deadline, what, client.list_children(&self.audit_dir)).await? {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(fail(what, e)),
        };
        let mut subjects = Vec::with_capacity(children.len());
        for child in children {
            subjects.push(NamespaceName::new(&child).map_err(|e| StoreError::Corrupt {
                message: format!(
                    "znode {}/{child} is not an audit subject: {e}",
                    self.audit_dir
                ),
            })?);
        }
        subjects.sort();
        Ok(subjects)
    }

    /// The sequence numbers of `subject`'s entries, sorted (one `getChildren`).
    async fn audit_seqs(
        &self,
        client: &Client,
        subject: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Vec<u64>, Fail> {
        let dir = self.audit_subject_dir(subject);
        let what = format!("listing the audit ledger of {subject}");
        let children = match timed(deadline, &what, client.list_children(&dir)).await? {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(fail(&what, e)),
        };
        let mut seqs = Vec::with_capacity(children.len());
        for child in children {
            seqs.push(entry_seq(&child).ok_or_else(|| StoreError::Corrupt {
                message: format!("znode {dir}/{child} is not an audit entry"),
            })?);
        }
        seqs.sort_unstable();
        Ok(seqs)
    }

    async fn entries_once(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
        deadline: Deadline,
    ) -> Result<Vec<AuditEntry>, Fail> {
        let client = self.client(deadline).await?;
        let seqs = self.audit_seqs(&client, subject, deadline).await?;
        let dir = self.audit_subject_dir(subject);
        let what = format!("reading the audit ledger of {subject}");
        // Sent at once, answered in order.
        let reads: Vec<_> = seqs
            .into_iter()
            .filter(|&seq| after.is_none_or(|a| seq > a))
            .take(limit)
            .map(|seq| {
                let path = format!("{dir}/{}", entry_name(seq));
                let read = client.get_data(&path);
                (seq, path, read)
            })
            .collect();
        let mut entries = Vec::with_capacity(reads.len());
        for (seq, path, read) in reads {
            let (data, stat) = match timed(deadline, &what, read).await? {
                Ok(found) => found,
                // Pruned since the listing.
                Err(ZkError::NoNode) => continue,
                Err(e) => return Err(fail(&what, e)),
            };
            let corrupt = |what: String| StoreError::Corrupt {
                message: format!("ZooKeeper audit entry {path}: {what}"),
            };
            let mut entry = audit::decode_record(subject.clone(), seq, &data).map_err(corrupt)?;
            // The time is the server's: when the znode was created.
            entry.at_unix_ms = created_ms(stat.ctime).map_err(corrupt)?;
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Removes `subject`'s entries created before `before_unix_ms`; how many.
    async fn prune_once(
        &self,
        subject: &NamespaceName,
        before_unix_ms: u64,
        deadline: Deadline,
    ) -> Result<u64, Fail> {
        let client = self.client(deadline).await?;
        let seqs = self.audit_seqs(&client, subject, deadline).await?;
        let dir = self.audit_subject_dir(subject);
        let what = format!("pruning the audit ledger of {subject}");
        let stats: Vec<_> = seqs
            .into_iter()
            .map(|seq| {
                let path = format!("{dir}/{}", entry_name(seq));
                let stat = client.check_stat(&path);
                (path, stat)
            })
            .collect();
        let mut old = Vec::new();
        for (path, stat) in stats {
            match timed(deadline, &what, stat).await? {
                Ok(Some(stat)) => {
                    let created = created_ms(stat.ctime).map_err(|e| StoreError::Corrupt {
                        message: format!("ZooKeeper audit entry {path}: {e}"),
                    })?;
                    if created < before_unix_ms {
                        old.push(path);
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(fail(&what, e)),
            }
        }
        let deletes: Vec<_> = old.iter().map(|path| client.delete(path, None)).collect();
        let mut removed = 0;
        for delete in deletes {
            match timed(deadline, &what, delete).await? {
                Ok(()) => removed += 1,
                // Removed by another pruner meanwhile.
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(&what, e)),
            }
        }
        Ok(removed)
    }
}

#[async_trait]
impl AuditLog for ZookeeperAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        self.audit_read(|deadline| async move {
            let dirs = self.audit_dirs(deadline).await?;
            let client = self.client(deadline).await?;
            let what = "listing audit subjects";
            // Only those with an entry left; sent at once, answered in order.
            let stats: Vec<_> = dirs
                .into_iter()
                .map(|subject| {
                    let stat = client.check_stat(&self.audit_subject_dir(&subject));
                    (subject, stat)
                })
                .collect();
            let mut subjects = Vec::new();
            for (subject, stat) in stats {
                match timed(deadline, what, stat).await? {
                    Ok(Some(stat)) if stat.num_children > 0 => subjects.push(subject),
                    Ok(_) => {}
                    Err(e) => return Err(fail(what, e)),
                }
            }
            Ok(subjects)
        })
        .await
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit_read(|deadline| self.entries_once(subject, after, limit, deadline))
            .await
    }

    async fn prune(&self, before_unix_ms: u64) -> Result<u64, StoreError> {
        let mut removed = 0;
        for subject in self
            .audit_read(|deadline| self.audit_dirs(deadline))
            .await?
        {
            // The subject's directory stays, empty or not: its child counter is the next
            // entry's sequence number, which must keep growing.
            removed += self
                .audit_read(|deadline| self.prune_once(&subject, before_unix_ms, deadline))
                .await?;
        }
        Ok(removed)
    }
}

/// The name ZooKeeper gives the sequential znode numbered `seq` (10 digits, zero-padded).
fn entry_name(seq: u64) -> String {
    format!("{seq:010}")
}

/// The sequence number of an entry's znode name (exactly 10 digits), `None` if it is none.
fn entry_seq(name: &str) -> Option<u64> {
    (name.len() == 10 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// A znode's creation time (`Stat.ctime`, the server's clock) as unix ms.
fn created_ms(ctime: i64) -> Result<u64, String> {
    u64::try_from(ctime).map_err(|_| format!("creation time {ctime} is negative"))
}

/// A lease group as read: its record and version, the worker records with their versions and
/// the live znodes with their stats.
struct GroupView {
    record: GroupRecord,
    version: i32,
    workers: HashMap<u64, (WorkerSlot, i32)>,
    live: HashMap<u64, (Live, Stat)>,
}

impl GroupView {
    /// Every worker id with a record or a live znode, sorted, live ones with the TTL of their
    /// session as time left (an upper bound: ZooKeeper does not say when a session will
    /// expire).
    fn slots(&self) -> Vec<WorkerSlot> {
        let mut slots: Vec<WorkerSlot> = self
            .workers
            .values()
            .map(|(slot, _)| {
                let mut slot = slot.clone();
                slot.expires_in = self.live.get(&slot.worker).map(|(l, _)| l.ttl);
                slot
            })
            .collect();
        // A live znode without a record (cannot be written by this module): still live.
        for (worker, (live, _)) in &self.live {
            if !self.workers.contains_key(worker) {
                slots.push(WorkerSlot {
                    worker: *worker,
                    token: live.token,
                    holder: live.holder.clone(),
                    floor_unix_ms: 0,
                    expires_in: Some(live.ttl),
                });
            }
        }
        slots.sort_by_key(|s| s.worker);
        slots
    }
}

/// The data of a live znode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Live {
    token: u64,
    ttl: Duration,
    holder: String,
}

/// The result of [`ZookeeperAuthority::read_worker`]: the worker record and its version, and the
/// live znode and its stat.
type WorkerRead = (Option<(WorkerSlot, i32)>, Option<(Live, Stat)>);

/// A failed read: worth another try (the connection was lost under it), or not.
enum Fail {
    Transient,
    Store(StoreError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

/// A read's failure: transient if the connection or session was lost under it.
fn fail(what: &str, e: ZkError) -> Fail {
    if transient(&e) {
        Fail::Transient
    } else {
        Fail::Store(failed(what, &e))
    }
}

/// Whether a call failed because the connection or the session went away (a read may be sent
/// again; a write's outcome is unknown).
fn transient(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::ConnectionLoss
            | ZkError::SessionExpired
            | ZkError::SessionMoved
            | ZkError::ClientClosed
            | ZkError::Timeout
            | ZkError::NoHosts
            // The library's own connection failures (I/O errors, no response in time).
            | ZkError::Custom(_)
    )
}

/// Pauses before a read is tried again (the deadline bounds the next try).
async fn retry_pause(deadline: Deadline, retries: &mut Backoff) {
    tokio::time::sleep_until(deadline.0.min(Instant::now() + retries.delay())).await;
}

/// A resumed lease session turned out to have expired (or be unknown to the ensemble).
#[derive(Debug)]
struct SessionGone;

/// Opens a session (a new one, or `resume`'s), within `deadline`.
async fn open_session(
    connect_string: &str,
    session_timeout: Duration,
    resume: Option<SessionInfo>,
    detached: bool,
    deadline: Deadline,
) -> Result<Client, StoreError> {
    let mut connector = Client::connector()
        .with_session_timeout(session_timeout)
        // The longest the library allows: a slow server is the operation timeout's to judge.
        .with_connection_timeout(session_timeout * 3 / 5)
        .with_fail_eagerly();
    if detached {
        connector = connector.with_detached();
    }
    if let Some(session) = resume {
        connector = connector.with_session(session);
    }
    match tokio::time::timeout_at(deadline.0, connector.connect(connect_string)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(failed(&format!("connecting to {connect_string}"), &e)),
        Err(_) => Err(unavailable(format!(
            "connecting to {connect_string}: no answer within {:?}",
            deadline.1
        ))),
    }
}

/// Reconnects to a detached lease session (restarting its timeout at the server) and lets go of
/// it again. `Err(SessionGone)` if that failed: it expired, or the ensemble cannot be reached
/// (then re-establishing the lease, which needs ZooKeeper too, reports what is wrong).
async fn resume_session(
    connect_string: &str,
    session: SessionInfo,
    ttl: Duration,
    deadline: Deadline,
) -> Result<(), SessionGone> {
    let connector = Client::connector()
        .with_session_timeout(ttl)
        .with_connection_timeout(ttl * 3 / 5)
        .with_fail_eagerly()
        .with_detached()
        .with_session(session);
    match tokio::time::timeout_at(deadline.0, connector.connect(connect_string)).await {
        // Dropped at once: detached, so the session lives on with its timeout restarted.
        Ok(Ok(_client)) => Ok(()),
        // Expired, or any other failure: the lease is re-established under a new session,
        // which needs ZooKeeper too and reports what is wrong.
        Ok(Err(_)) | Err(_) => Err(SessionGone),
    }
}

/// Awaits a call under `deadline`; the outer error is the timeout.
async fn timed<T, E>(
    (deadline, op_timeout): Deadline,
    what: &str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<Result<T, E>, StoreError> {
    match tokio::time::timeout_at(deadline, call).await {
        Ok(result) => Ok(result),
        Err(_) => Err(unavailable(format!(
            "{what}: no answer within {op_timeout:?}"
        ))),
    }
}

/// The outcome of a `multi`: `Ok(Some)` committed, `Ok(None)` lost a race (a version check, an
/// existing or missing znode), otherwise `Unavailable`.
fn decode_incarnation(data: &[u8]) -> Result<Incarnation, StoreError> {
    let text = std::str::from_utf8(data).unwrap_or("");
    Incarnation::parse(text).map_err(|e| StoreError::Corrupt {
        message: format!("the store's incarnation: {e}"),
    })
}

fn committed<T>(what: &str, result: Result<T, MultiWriteError>) -> Attempt<T> {
    match result {
        Ok(done) => Ok(Some(done)),
        Err(MultiWriteError::OperationFailed {
            source: ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode,
            ..
        }) => Ok(None),
        Err(MultiWriteError::OperationFailed { source, .. })
        | Err(MultiWriteError::RequestFailed { source }) => Err(failed(what, &source)),
    }
}

fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}

/// A failed call: every client error is `Unavailable` (the outcome of a write is unknown).
fn failed(what: &str, e: &ZkError) -> StoreError {
    unavailable(format!("{what}: {e}"))
}

fn worker_id(group: &NamespaceName, child: &str) -> Result<u64, StoreError> {
    match child.parse::<u64>() {
        Ok(w) if w.to_string() == child => Ok(w),
        _ => Err(StoreError::Corrupt {
            message: format!("ZooKeeper lease group {group}: {child:?} is not a worker id"),
        }),
    }
}

// ----- records -----

fn encode_ns(state: &NamespaceState) -> String {
    let spec = &state.spec;
    format!(
        "{NS_FORMAT} bits={} first={} step={} offset={} watermark={}",
        spec.width().bits(),
        spec.first(),
        spec.step(),
        spec.offset(),
        state.watermark
    )
}

fn encode_group(group: &GroupRecord) -> String {
    format!(
        "{GROUP_FORMAT} last_token={} layout={}",
        group.last_token, group.layout
    )
}

fn encode_worker(slot: &WorkerSlot) -> String {
    format!(
        "{WORKER_FORMAT} token={} floor={} holder={}",
        slot.token, slot.floor_unix_ms, slot.holder
    )
}

fn encode_live(live: &Live) -> String {
    format!(
        "{LIVE_FORMAT} token={} ttl_ms={} holder={}",
        live.token,
        live.ttl.as_millis(),
        live.holder
    )
}

/// Splits `raw` into `format`, `numbers.len()` numeric fields named `numbers`, and (if `text`
/// is given) a last free-text field running to the end.
fn fields(
    raw: &[u8],
    format: &str,
    numbers: &[&str],
    text: Option<&str>,
) -> Result<(Vec<u64>, String), String> {
    let s = std::str::from_utf8(raw).map_err(|_| "not UTF-8 text".to_owned())?;
    let mut rest = s
        .strip_prefix(format)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| {
            format!("does not start with {format:?} (written by another idmint version?)")
        })?;
    let mut values = Vec::with_capacity(numbers.len());
    for (i, key) in numbers.iter().enumerate() {
        let last = i + 1 == numbers.len() && text.is_none();
        let (field, after) = if last {
            (rest, "")
        } else {
            rest.split_once(' ')
                .ok_or_else(|| format!("field {key} is missing or out of place"))?
        };
        let value = field
            .strip_prefix(key)
            .and_then(|f| f.strip_prefix('='))
            .ok_or_else(|| format!("field {key} is missing or out of place"))?;
        let number = value
            .parse::<u64>()
            .ok()
            .filter(|n| n.to_string() == value)
            .ok_or_else(|| format!("field {key}={value} is not a canonical number"))?;
        values.push(number);
        rest = after;
    }
    let free = match text {
        Some(key) => rest
            .strip_prefix(key)
            .and_then(|f| f.strip_prefix('='))
            .ok_or_else(|| format!("field {key} is missing or out of place"))?
            .to_owned(),
        None => String::new(),
    };
    Ok((values, free))
}

fn decode_ns(name: &NamespaceName, raw: &[u8]) -> Result<NamespaceState, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("ZooKeeper record of namespace {name}: {what}"),
    };
    let (v, _) = fields(
        raw,
        NS_FORMAT,
        &["bits", "first", "step", "offset", "watermark"],
        None,
    )
    .map_err(corrupt)?;
    let width = u32::try_from(v[0])
        .ok()
        .and_then(Width::from_bits)
        .ok_or_else(|| corrupt(format!("width {} is neither 32 nor 64", v[0])))?;
    let state = ops::stored_state(name.clone(), width, v[1], v[2], v[3], v[4]).map_err(corrupt)?;
    if encode_ns(&state).as_bytes() != raw {
        return Err(corrupt("not in canonical form".to_owned()));
    }
    Ok(state)
}

fn decode_group(group: &NamespaceName, raw: &[u8]) -> Result<GroupRecord, StoreError> {
    let (v, layout) =
        fields(raw, GROUP_FORMAT, &["last_token"], Some("layout")).map_err(|what| {
            StoreError::Corrupt {
                message: format!("ZooKeeper record of lease group {group}: {what}"),
            }
        })?;
    Ok(GroupRecord {
        layout,
        last_token: v[0],
    })
}

fn decode_worker(group: &NamespaceName, worker: u64, raw: &[u8]) -> Result<WorkerSlot, StoreError> {
    let (v, holder) =
        fields(raw, WORKER_FORMAT, &["token", "floor"], Some("holder")).map_err(|what| {
            StoreError::Corrupt {
                message: format!(
                    "ZooKeeper record of worker {worker} of lease group {group}: {what}"
                ),
            }
        })?;
    Ok(WorkerSlot {
        worker,
        token: v[0],
        holder,
        floor_unix_ms: v[1],
        expires_in: None,
    })
}

fn decode_live(group: &NamespaceName, worker: u64, raw: &[u8]) -> Result<Live, StoreError> {
    let (v, holder) =
        fields(raw, LIVE_FORMAT, &["token", "ttl_ms"], Some("holder")).map_err(|what| {
            StoreError::Corrupt {
                message: format!(
                    "ZooKeeper live lease of worker {worker} of lease group {group}: {what}"
                ),
            }
        })?;
    Ok(Live {
        token: v[0],
        ttl: Duration::from_millis(v[1]),
        holder,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn name() -> NamespaceName {
        NamespaceName::new("photos").unwrap()
    }

    #[test]
    fn audit_entry_names_are_ten_digits() {
        assert_eq!(entry_name(7), "0000000007");
        assert_eq!(entry_seq(&entry_name(7)), Some(7));
        assert_eq!(entry_seq("2147483647"), Some(2_147_483_647));
        for bad in [
            "",
            "7",
            "-000000001",
            "000000000x",
            "00000000007",
            "e000000007",
        ] {
            assert_eq!(entry_seq(bad), None, "{bad:?}");
        }
        assert_eq!(created_ms(1_700_000_000_000), Ok(1_700_000_000_000));
        assert!(created_ms(-1).is_err());
    }

    #[test]
    fn records_round_trip() {
        let specs = [
            SequenceSpec::default_64(),
            SequenceSpec::new(Width::Bits32, 5, 2, 1).unwrap(),
            SequenceSpec::new(Width::Bits64, u64::MAX >> 2, 1000, 999).unwrap(),
        ];
        for spec in specs {
            for watermark in [spec.first(), spec.first() + 17, spec.width().max_id() + 1] {
                let state = NamespaceState {
                    name: name(),
                    spec,
                    watermark,
                };
                assert_eq!(
                    decode_ns(&name(), encode_ns(&state).as_bytes()).unwrap(),
                    state
                );
            }
        }
        let group = GroupRecord {
            layout: "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=1ms epoch=0".into(),
            last_token: 7,
        };
        assert_eq!(
            decode_group(&name(), encode_group(&group).as_bytes()).unwrap(),
            group
        );
        let slot = WorkerSlot {
            worker: 3,
            token: 9,
            holder: "host a pid=5 started 12:00".into(),
            floor_unix_ms: 1_700_000_005_000,
            expires_in: None,
        };
        assert_eq!(
            decode_worker(&name(), 3, encode_worker(&slot).as_bytes()).unwrap(),
            slot
        );
        let live = Live {
            token: 9,
            ttl: Duration::from_secs(10),
            holder: String::new(),
        };
        assert_eq!(
            decode_live(&name(), 3, encode_live(&live).as_bytes()).unwrap(),
            live
        );
        assert_eq!(
            encode_ns(&NamespaceState {
                name: name(),
                spec: SequenceSpec::default_64(),
                watermark: 1001
            }),
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001"
        );
    }

    #[test]
    fn damaged_records_are_corrupt_not_panics() {
        let bad = [
            "",
            "\u{0}\u{1}",
            "idmint.ns/v2 bits=64 first=1 step=1 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1 extra=1",
            "idmint.ns/v1 bits=16 first=1 step=1 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 first=1 step=0 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 step=1 first=1 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=0",
            "idmint.ns/v1 bits=32 first=1 step=1 offset=0 watermark=2147483649",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=+5",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=05",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0  watermark=5",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=99999999999999999999",
        ];
        for raw in bad {
            assert!(
                matches!(
                    decode_ns(&name(), raw.as_bytes()),
                    Err(StoreError::Corrupt { .. })
                ),
                "{raw:?} was accepted"
            );
        }
        for raw in [
            "",
            "idmint.group/v1 layout=x",
            "idmint.group/v1 last_token=x layout=y",
        ] {
            assert!(decode_group(&name(), raw.as_bytes()).is_err(), "{raw:?}");
        }
        for raw in [
            "idmint.worker/v1 token=1 holder=x",
            "idmint.worker/v1 token=01 floor=1 holder=x",
            "idmint.live/v1 token=1 ttl_ms=5 holder=x",
        ] {
            assert!(
                decode_worker(&name(), 1, raw.as_bytes()).is_err(),
                "{raw:?}"
            );
        }
        assert!(decode_live(&name(), 1, b"idmint.live/v1 token=1 holder=x").is_err());
        assert!(worker_id(&name(), "01").is_err());
        assert!(worker_id(&name(), "x").is_err());
        assert_eq!(worker_id(&name(), "12").unwrap(), 12);
    }
}
