//! The audit ledger: an append-only record, kept by every durable authority next to its
//! watermarks, of every grant it made (blocks, give-backs, worker leases, forward-only
//! administration), and the verifier ([`verify`], [`SubjectVerifier`]) that proves from it that no id was granted twice
//! (docs/design.md, "The audit ledger"; `idmint audit verify`).
//!
//! Not to be confused with the node record ([`crate::node_record`]: what one node remembers of
//! the namespaces it set up, to detect a store that lost data): this one lives *in* the store
//! and records what the store granted, to every node.
//!
//! Invariants every backend keeps:
//! - **same write**: an entry is written in the same atomic write as the watermark change it
//!   records (a transaction, an etcd `Txn`, a ZooKeeper `multi`, one redb transaction), so there
//!   is no grant without its entry and no entry without its grant;
//! - **ordered per subject**: [`AuditEntry::seq`] increases, within one subject (a namespace or a
//!   lease group), in the order the writes took effect; across subjects it means nothing;
//! - **append-only**: entries are never changed, except by pruning ([`prune`]): it replaces
//!   the newest entry of a subject's pruned prefix by a [`AuditEvent::Checkpoint`] that
//!   stands for the whole prefix (keeping that entry's seq and time), then removes the older
//!   ones ([`AuditLog::fold`]); a ledger that had entries always keeps at least its checkpoint;
//! - **the store's clock**: retention is measured by the clock that stamped the entries
//!   ([`AuditLog::now_unix_ms`]), never the pruning node's;
//! - **reads change nothing**: [`AuditLog::subjects`] and [`AuditLog::entries`] never write.
//!
//! What the verifier proves, per subject, reading entries in `seq` order:
//! - a checkpoint stands for the pruned entries before it: every id below its `below` was
//!   granted and is live (not given back), its `token` is the group's highest fencing token;
//! - no two grants (blocks, rebases, retirements) share an id, unless the ids in between went
//!   back by a recorded give-back;
//! - a give-back returns the tail of a live grant (one whose grant is not in the ledger, removed
//!   before checkpoints existed, is counted as unmatched, not as a violation);
//! - every grant lies below the namespace's current watermark;
//! - every id of a namespace below its watermark is accounted for: the ledger records its
//!   grant, or a checkpoint covers it. A namespace above its first id with no entry (an
//!   emptied or never-kept ledger) is a violation: the verifier never passes on nothing;
//! - per lease group, fencing tokens strictly increase, and a `(worker, token)` is held by one
//!   holder only: an entry repeating an earlier one's worker, token and holder is that lease
//!   re-established after it lapsed; another holder under the same token is two nodes on one
//!   worker id.
//!
//! What it does not do: check residue classes across the members of a multi authority (each
//! member keeps and verifies its own ledger, and members own disjoint classes by construction,
//! checked at start), or cover a tier above: an upstream authority keeps no ledger; the global
//! tier's records the blocks it granted to the tier below.

use crate::{NamespaceState, StoreError};
use async_trait::async_trait;
use idmint_core::NamespaceName;
use std::sync::OnceLock;

mod prune;
mod verifier;

pub use prune::{prune, Pruned};
pub use verifier::{verify, AuditReport, SubjectVerifier, Violation, PAGE};

/// One entry of the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Its place in its subject's ledger: increasing in the order the writes took effect.
    pub seq: u64,
    /// When it was written, ms since the Unix epoch, by the store's clock where it has one
    /// (SQL servers, ZooKeeper), else by the writing process's.
    pub at_unix_ms: u64,
    /// The namespace (or, for [`AuditEvent::Leased`], the lease group).
    pub subject: NamespaceName,
    /// What was granted or returned.
    pub event: AuditEvent,
    /// Who it was granted to: the writing process ([`holder`]).
    pub holder: String,
}

/// What an entry records. Ranges are `[start, end)` as blocks are (`end` is one past the last
/// id's value), of the namespace's residue class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditEvent {
    /// A block reserved ([`crate::Authority::reserve`]); the watermark moved to `end`.
    Granted {
        /// First id.
        start: u64,
        /// One past the last id.
        end: u64,
    },
    /// A tail handed back ([`crate::Authority::give_back`]); the watermark moved down to `start`.
    GivenBack {
        /// First id of the tail.
        start: u64,
        /// One past its last id: the watermark before.
        end: u64,
    },
    /// A worker lease acquired on `worker` of the group, with fencing token `token`.
    Leased {
        /// The worker id.
        worker: u64,
        /// Its fencing token.
        token: u64,
    },
    /// `idmint admin rebase`: the watermark moved up from `from` to `to`; the ids between
    /// are never handed out.
    Rebased {
        /// The watermark before.
        from: u64,
        /// The watermark after.
        to: u64,
    },
    /// `idmint admin retire`: the watermark moved from `from` to the end of the id space `to`;
    /// the namespace hands out no id any more.
    Retired {
        /// The watermark before.
        from: u64,
        /// The watermark after: one past the namespace's largest id.
        to: u64,
    },
    /// Unused blocks parked by their holder at its clean stop ([`crate::Authority::park`]):
    /// still granted to it, claimable once.
    Parked {
        /// First id.
        start: u64,
        /// One past the last id.
        end: u64,
    },
    /// Parked blocks claimed back by their holder ([`crate::Authority::claim`]).
    Claimed {
        /// First id.
        start: u64,
        /// One past the last id.
        end: u64,
    },
    /// Written by pruning in place of the entries it removed ([`prune`]): every id below
    /// `below` was granted and not given back by then, and `token` was the highest fencing
    /// token leased (0: none).
    Checkpoint {
        /// The watermark after the removed entries.
        below: u64,
        /// The highest fencing token among them.
        token: u64,
    },
}

impl AuditEvent {
    /// The event's name in exports and stored records.
    pub fn name(&self) -> &'static str {
        match self {
            AuditEvent::Granted { .. } => "granted",
            AuditEvent::GivenBack { .. } => "given_back",
            AuditEvent::Leased { .. } => "leased",
            AuditEvent::Rebased { .. } => "rebased",
            AuditEvent::Retired { .. } => "retired",
            AuditEvent::Parked { .. } => "parked",
            AuditEvent::Claimed { .. } => "claimed",
            AuditEvent::Checkpoint { .. } => "checkpoint",
        }
    }

    /// Its two numbers, in the order [`AuditEvent::from_parts`] takes them.
    pub fn numbers(&self) -> (u64, u64) {
        match *self {
            AuditEvent::Granted { start, end }
            | AuditEvent::GivenBack { start, end }
            | AuditEvent::Parked { start, end }
            | AuditEvent::Claimed { start, end } => (start, end),
            AuditEvent::Leased { worker, token } => (worker, token),
            AuditEvent::Rebased { from, to } | AuditEvent::Retired { from, to } => (from, to),
            AuditEvent::Checkpoint { below, token } => (below, token),
        }
    }

    /// The event named `name` with `numbers`, as stored; `None` for an unknown name.
    pub fn from_parts(name: &str, a: u64, b: u64) -> Option<AuditEvent> {
        Some(match name {
            "granted" => AuditEvent::Granted { start: a, end: b },
            "given_back" => AuditEvent::GivenBack { start: a, end: b },
            "leased" => AuditEvent::Leased {
                worker: a,
                token: b,
            },
            "rebased" => AuditEvent::Rebased { from: a, to: b },
            "retired" => AuditEvent::Retired { from: a, to: b },
            "checkpoint" => AuditEvent::Checkpoint { below: a, token: b },
            "parked" => AuditEvent::Parked { start: a, end: b },
            "claimed" => AuditEvent::Claimed { start: a, end: b },
            _ => return None,
        })
    }

    /// The ids it takes out of the free space, `[start, end)`, if any: grants, rebases and
    /// retirements (an empty move, `from == to`, takes none).
    fn taken(&self) -> Option<(u64, u64)> {
        match *self {
            AuditEvent::Granted { start, end } => Some((start, end)),
            AuditEvent::Rebased { from, to } | AuditEvent::Retired { from, to } => {
                (from < to).then_some((from, to))
            }
            AuditEvent::GivenBack { .. }
            | AuditEvent::Leased { .. }
            | AuditEvent::Parked { .. }
            | AuditEvent::Claimed { .. }
            | AuditEvent::Checkpoint { .. } => None,
        }
    }
}

/// Why a forward-only move of a watermark is made ([`crate::Authority::advance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// `idmint admin rebase`: start above existing ids.
    Rebase,
    /// `idmint admin retire`: hand out nothing any more.
    Retire,
}

/// The outcome of [`crate::Authority::advance`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advanced {
    /// The watermark before.
    pub from: u64,
    /// The state after (its watermark is at least the target; unchanged if it already was).
    pub state: NamespaceState,
}

/// The ledger of one store. See the module docs.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Every subject (namespace or lease group) with at least one entry, sorted.
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError>;

    /// Up to `limit` entries of `subject` with `seq` above `after` (all with `None`), in `seq`
    /// order. Fewer than `limit` means there are no more.
    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError>;

    /// The current time, ms since the Unix epoch, by the clock that stamps the entries: the
    /// store's own where it has one. [`prune`] measures retention with it.
    async fn now_unix_ms(&self) -> Result<u64, StoreError>;

    /// Replaces entry `through` of `subject` by `checkpoint` (keeping its seq and time), then
    /// removes the subject's entries below it; returns how many were removed. The checkpoint
    /// is written before or with the removals, never after, so no removal is ever without
    /// it. If entry `through` is gone (another pruner folded past it), does nothing.
    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError>;
}

static HOLDER: OnceLock<String> = OnceLock::new();

/// Who this process is in the ledger: `host pid N` unless [`set_holder`] named it first.
pub fn holder() -> &'static str {
    HOLDER.get_or_init(|| format!("{} pid {}", host_name(), std::process::id()))
}

/// Names this process in the ledger (a node's configured name). Only the first call (or the
/// first [`holder`]) counts; returns whether this one did.
pub fn set_holder(name: String) -> bool {
    HOLDER.set(name).is_ok()
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else "unknown").
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The current time as ms since the Unix epoch, for backends without a clock of their own.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An entry's stored form for key-value backends (file, etcd, ZooKeeper): one line,
/// `v1 <at_unix_ms> <event> <a> <b> <holder>` (the holder last: it may hold spaces). The key
/// holds the subject and the sequence number.
pub fn encode_record(at_unix_ms: u64, event: &AuditEvent, holder: &str) -> String {
    let (a, b) = event.numbers();
    format!("v1 {at_unix_ms} {} {a} {b} {holder}", event.name())
}

/// Reads back [`encode_record`]'s line; the error says what is wrong (backends wrap it in
/// [`StoreError::Corrupt`] with the place).
pub fn decode_record(subject: NamespaceName, seq: u64, bytes: &[u8]) -> Result<AuditEntry, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "audit record is not UTF-8".to_string())?;
    let mut parts = text.splitn(6, ' ');
    let mut next = |what: &str| {
        parts
            .next()
            .ok_or_else(|| format!("audit record {text:?} has no {what}"))
    };
    if next("version")? != "v1" {
        return Err(format!("audit record {text:?} is not of version v1"));
    }
    let number = |s: &str, what: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("audit record {text:?}: {what} {s:?} is not a number"))
    };
    let at_unix_ms = number(next("time")?, "time")?;
    let name = next("event")?;
    let a = number(next("first number")?, "first number")?;
    let b = number(next("second number")?, "second number")?;
    let holder = next("holder")?.to_string();
    let event = AuditEvent::from_parts(name, a, b)
        .ok_or_else(|| format!("audit record {text:?}: unknown event {name:?}"))?;
    Ok(AuditEntry {
        seq,
        at_unix_ms,
        subject,
        event,
        holder,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ns(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
    }

    use AuditEvent::*;

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        for event in [
            Granted { start: 1, end: 9 },
            GivenBack { start: 3, end: 9 },
            Leased {
                worker: 7,
                token: 12,
            },
            Rebased {
                from: 9,
                to: u64::MAX,
            },
            Retired { from: 1, to: 2 },
            Checkpoint {
                below: 1001,
                token: 4,
            },
        ] {
            let line = encode_record(42, &event, "web-1 pid 7");
            let back = decode_record(ns("a"), 3, line.as_bytes()).unwrap();
            assert_eq!(back.event, event);
            assert_eq!((back.seq, back.at_unix_ms), (3, 42));
            assert_eq!(back.holder, "web-1 pid 7");
        }
        for bad in [
            "",
            "v2 1 granted 1 2 h",
            "v1 x granted 1 2 h",
            "v1 1 stolen 1 2 h",
            "v1 1 granted 1",
        ] {
            assert!(decode_record(ns("a"), 1, bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(decode_record(ns("a"), 1, &[0xff, 0xfe]).is_err());
    }
}
