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
//! - a give-back returns the tail of a live grant (one whose grant was pruned is counted as
//!   unmatched, not as a violation: retention may have removed its grant);
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
use std::collections::BTreeMap;
use std::sync::OnceLock;

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
            AuditEvent::Checkpoint { .. } => "checkpoint",
        }
    }

    /// Its two numbers, in the order [`AuditEvent::from_parts`] takes them.
    pub fn numbers(&self) -> (u64, u64) {
        match *self {
            AuditEvent::Granted { start, end } | AuditEvent::GivenBack { start, end } => {
                (start, end)
            }
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

/// Something the ledger shows that must never happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The namespace or lease group.
    pub subject: NamespaceName,
    /// What is wrong, naming the entries.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}

/// What a verification read and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Subjects read.
    pub subjects: u64,
    /// Entries read.
    pub entries: u64,
    /// Of them, grants (blocks, rebases, retirements).
    pub grants: u64,
    /// Of them, give-backs.
    pub give_backs: u64,
    /// Of them, worker leases.
    pub leases: u64,
    /// Give-backs whose grant is not in the ledger (pruned without a checkpoint).
    pub unmatched_give_backs: u64,
    /// Of them, checkpoints left by pruning.
    pub checkpoints: u64,
    /// Namespaces whose watermark was checked against their grants.
    pub watermarks_checked: u64,
    /// What must never happen, and did.
    pub violations: Vec<Violation>,
}

impl AuditReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// Adds `other`'s counts and violations (another member of a multi authority).
    pub fn merge(&mut self, other: AuditReport) {
        self.subjects += other.subjects;
        self.entries += other.entries;
        self.grants += other.grants;
        self.give_backs += other.give_backs;
        self.leases += other.leases;
        self.unmatched_give_backs += other.unmatched_give_backs;
        self.checkpoints += other.checkpoints;
        self.watermarks_checked += other.watermarks_checked;
        self.violations.extend(other.violations);
    }
}

/// The verifier of one subject: feed it the subject's entries in `seq` order
/// ([`SubjectVerifier::add`]), then its watermark ([`SubjectVerifier::finish`]).
///
/// It keeps the ids granted and not given back as disjoint, merged ranges, so its memory is
/// the number of gaps between live grants, not the number of entries.
#[derive(Debug)]
pub struct SubjectVerifier {
    subject: NamespaceName,
    /// Live granted ranges, start → end, disjoint and not touching.
    live: BTreeMap<u64, u64>,
    last_token: Option<u64>,
    /// The highest token a checkpoint stands for: a lease at or below it whose entry was
    /// pruned may be re-established, so it cannot be told from a repeat.
    checkpoint_token: u64,
    /// The lowest id the ledger accounts for (a recorded range's start; 0 after a checkpoint).
    lowest: Option<u64>,
    /// Per fencing token: the worker id, the holder and the entry that first leased it.
    leases: BTreeMap<u64, (u64, String, u64)>,
    last_seq: Option<u64>,
    report: AuditReport,
}

impl SubjectVerifier {
    /// A verifier for `subject`, with nothing read yet.
    pub fn new(subject: NamespaceName) -> Self {
        SubjectVerifier {
            subject,
            live: BTreeMap::new(),
            last_token: None,
            checkpoint_token: 0,
            lowest: None,
            leases: BTreeMap::new(),
            last_seq: None,
            report: AuditReport {
                subjects: 1,
                ..AuditReport::default()
            },
        }
    }

    fn violation(&mut self, message: String) {
        self.report.violations.push(Violation {
            subject: self.subject.clone(),
            message,
        });
    }

    /// Reads the next entry.
    pub fn add(&mut self, entry: &AuditEntry) {
        self.report.entries += 1;
        if let Some(last) = self.last_seq {
            if entry.seq <= last {
                self.violation(format!(
                    "entry {} follows entry {last}: the ledger is out of order",
                    entry.seq
                ));
            }
        }
        self.last_seq = Some(entry.seq);
        if let Some((start, end)) = entry.event.taken() {
            self.report.grants += 1;
            self.take(entry, start, end);
            return;
        }
        match entry.event {
            AuditEvent::GivenBack { start, end } => {
                self.report.give_backs += 1;
                self.note_lowest(start);
                self.give_back(entry, start, end);
            }
            AuditEvent::Checkpoint { below, token } => {
                self.report.checkpoints += 1;
                self.checkpoint(below, token);
            }
            AuditEvent::Leased { worker, token } => {
                self.report.leases += 1;
                if let Some((w, holder, first)) = self.leases.get(&token).cloned() {
                    if w != worker || holder != entry.holder {
                        self.violation(format!(
                            "entry {}: worker {worker} leased with fencing token {token} by {}, \
                             but entry {first} gave token {token} (worker {w}) to {holder}: two \
                             holders under one token",
                            entry.seq, entry.holder
                        ));
                    }
                    // Otherwise the same lease, re-established after it lapsed.
                    return;
                }
                if let Some(last) = self.last_token {
                    if token <= last && token > self.checkpoint_token {
                        self.violation(format!(
                            "entry {}: worker {worker} leased with fencing token {token}, not \
                             above the group's earlier token {last}",
                            entry.seq
                        ));
                    }
                }
                self.leases
                    .insert(token, (worker, entry.holder.clone(), entry.seq));
                self.last_token = Some(self.last_token.map_or(token, |t| t.max(token)));
            }
            _ => {}
        }
    }

    fn note_lowest(&mut self, id: u64) {
        self.lowest = Some(self.lowest.map_or(id, |l| l.min(id)));
    }

    /// Everything below `below` is live from here on (the pruned entries granted it); live
    /// ranges above it stay.
    fn checkpoint(&mut self, below: u64, token: u64) {
        self.note_lowest(0);
        if below > 0 {
            let mut end = below;
            let covered: Vec<u64> = self.live.range(..=below).map(|(&s, _)| s).collect();
            for s in covered {
                if let Some(e) = self.live.remove(&s) {
                    end = end.max(e);
                }
            }
            self.live.insert(0, end);
        }
        if token > 0 {
            self.checkpoint_token = self.checkpoint_token.max(token);
            self.last_token = Some(self.last_token.map_or(token, |t| t.max(token)));
        }
    }

    /// The checkpoint that stands for everything read so far: the highest live id's end and
    /// the highest fencing token.
    pub fn checkpoint_event(&self) -> AuditEvent {
        AuditEvent::Checkpoint {
            below: self.live.iter().next_back().map_or(0, |(_, &e)| e),
            token: self.last_token.unwrap_or(0),
        }
    }

    /// Whether nothing read so far is a violation.
    pub fn is_clean(&self) -> bool {
        self.report.is_clean()
    }

    fn take(&mut self, entry: &AuditEntry, start: u64, end: u64) {
        self.note_lowest(start);
        if start >= end {
            self.violation(format!(
                "entry {} ({}) records an empty or reversed range [{start}, {end})",
                entry.seq,
                entry.event.name()
            ));
            return;
        }
        // The live range starting last below `end` is the only one that can overlap.
        if let Some((&s, &e)) = self.live.range(..end).next_back() {
            if e > start {
                self.violation(format!(
                    "entry {} ({} [{start}, {end}) to {}) overlaps ids [{}, {}) granted earlier \
                     and not given back",
                    entry.seq,
                    entry.event.name(),
                    entry.holder,
                    s.max(start),
                    e.min(end)
                ));
                return;
            }
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((&s, &e)) = self.live.range(..start).next_back() {
            if e == start {
                self.live.remove(&s);
                new_start = s;
            }
        }
        if let Some(e) = self.live.remove(&end) {
            new_end = e;
        }
        self.live.insert(new_start, new_end);
    }

    fn give_back(&mut self, entry: &AuditEntry, start: u64, end: u64) {
        match self.live.range(..end).next_back().map(|(&s, &e)| (s, e)) {
            Some((s, e)) if e == end && s <= start => {
                self.live.remove(&s);
                if s < start {
                    self.live.insert(s, start);
                }
            }
            Some((s, e)) if e > start && e != end => {
                self.violation(format!(
                    "entry {}: give-back [{start}, {end}) is not the tail of the live grant \
                     [{s}, {e})",
                    entry.seq
                ));
            }
            _ => self.report.unmatched_give_backs += 1,
        }
    }

    /// Checks every live grant against the namespace's current state (`None`: a lease group,
    /// or a namespace the store no longer has) and returns the report.
    pub fn finish(mut self, state: Option<&NamespaceState>) -> AuditReport {
        if let Some(state) = state {
            self.report.watermarks_checked += 1;
            let bottom = self.lowest.unwrap_or(u64::MAX).min(state.watermark);
            if let Some(first) = state.spec.align_up(state.spec.first()) {
                if first < bottom {
                    self.violation(format!(
                        "ids [{first}, {bottom}) lie below the watermark {} but the ledger \
                         records neither their grant nor a checkpoint: it was emptied or not \
                         kept, and nothing proves they were granted once",
                        state.watermark
                    ));
                }
            }
            if let Some((&s, &e)) = self.live.iter().next_back() {
                if e > state.watermark {
                    self.violation(format!(
                        "ids [{}, {e}) were granted but the watermark is {}: they would be \
                         granted again",
                        s.max(state.watermark),
                        state.watermark
                    ));
                }
            }
        } else if !self.live.is_empty() && self.last_token.is_none() {
            self.violation(
                "the ledger records grants of a namespace the store does not have".to_string(),
            );
        }
        self.report
    }
}

/// How many entries [`verify`] reads per call.
pub const PAGE: usize = 10_000;

/// Reads every subject of `log` and verifies it against `states` (the store's namespaces, from
/// [`crate::Authority::list`]); a namespace of `states` with no entry is verified too (with
/// nothing read: above its first id, that is a violation). Reads only.
pub async fn verify(
    log: &dyn AuditLog,
    states: &[NamespaceState],
) -> Result<AuditReport, StoreError> {
    let mut report = AuditReport::default();
    let subjects = log.subjects().await?;
    let known: std::collections::BTreeSet<&NamespaceName> = subjects.iter().collect();
    for state in states {
        if !known.contains(&state.name) {
            report.merge(SubjectVerifier::new(state.name.clone()).finish(Some(state)));
        }
    }
    for subject in subjects {
        let mut verifier = SubjectVerifier::new(subject.clone());
        let mut after = None;
        loop {
            let page = log.entries(&subject, after, PAGE).await?;
            for entry in &page {
                verifier.add(entry);
            }
            after = page.last().map(|e| e.seq).or(after);
            if page.len() < PAGE {
                break;
            }
        }
        let state = states.iter().find(|s| s.name == subject);
        report.merge(verifier.finish(state));
    }
    Ok(report)
}

/// What [`prune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Entries removed.
    pub removed: u64,
    /// Checkpoints written (one per subject pruned).
    pub checkpoints: u64,
    /// Subjects left unpruned because their old entries show a violation: pruning never
    /// removes the evidence.
    pub kept: Vec<Violation>,
}

/// Prunes `log` to `retention`: per subject, the longest prefix (in `seq` order) of entries
/// stamped more than `retention` before the store's clock ([`AuditLog::now_unix_ms`]) is
/// folded into one checkpoint ([`AuditLog::fold`]). A prefix that is already one checkpoint
/// is left alone; a prefix with a violation is kept whole.
pub async fn prune(
    log: &dyn AuditLog,
    retention: std::time::Duration,
) -> Result<Pruned, StoreError> {
    let now = log.now_unix_ms().await?;
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    let cutoff = now.saturating_sub(retention_ms);
    let mut pruned = Pruned::default();
    for subject in log.subjects().await? {
        let mut verifier = SubjectVerifier::new(subject.clone());
        let mut through: Option<u64> = None;
        let mut first_is_checkpoint = false;
        let mut count = 0u64;
        'pages: loop {
            let page = log.entries(&subject, through, PAGE).await?;
            for entry in &page {
                if entry.at_unix_ms >= cutoff {
                    break 'pages;
                }
                if count == 0 {
                    first_is_checkpoint = matches!(entry.event, AuditEvent::Checkpoint { .. });
                }
                verifier.add(entry);
                through = Some(entry.seq);
                count += 1;
            }
            if page.len() < PAGE {
                break;
            }
        }
        let Some(through) = through else { continue };
        if count == 1 && first_is_checkpoint {
            continue;
        }
        if !verifier.is_clean() {
            pruned.kept.extend(verifier.report.violations);
            continue;
        }
        let checkpoint = verifier.checkpoint_event();
        pruned.removed += log.fold(&subject, through, checkpoint).await?;
        pruned.checkpoints += 1;
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::SequenceSpec;

    fn ns(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
    }

    fn entry(seq: u64, event: AuditEvent) -> AuditEntry {
        AuditEntry {
            seq,
            at_unix_ms: 1,
            subject: ns("a"),
            event,
            holder: "h pid 1".into(),
        }
    }

    fn state(watermark: u64) -> NamespaceState {
        NamespaceState {
            name: ns("a"),
            spec: SequenceSpec::default_64(),
            watermark,
        }
    }

    fn run(events: &[AuditEvent], watermark: u64) -> AuditReport {
        let mut v = SubjectVerifier::new(ns("a"));
        for (i, e) in events.iter().enumerate() {
            v.add(&entry(i as u64 + 1, *e));
        }
        v.finish(Some(&state(watermark)))
    }

    use AuditEvent::*;

    #[test]
    fn disjoint_grants_and_a_regranted_tail_are_clean() {
        let r = run(
            &[
                Granted { start: 1, end: 101 },
                Granted {
                    start: 101,
                    end: 201,
                },
                GivenBack {
                    start: 150,
                    end: 201,
                },
                Granted {
                    start: 150,
                    end: 300,
                },
                Rebased {
                    from: 300,
                    to: 1000,
                },
            ],
            1000,
        );
        assert!(r.is_clean(), "{:?}", r.violations);
        assert_eq!((r.entries, r.grants, r.give_backs), (5, 4, 1));
        assert_eq!(r.unmatched_give_backs, 0);
    }

    #[test]
    fn an_overlap_is_a_violation() {
        let r = run(
            &[
                Granted { start: 1, end: 101 },
                Granted {
                    start: 100,
                    end: 200,
                },
            ],
            200,
        );
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].message.contains("[100, 101)"));
    }

    #[test]
    fn a_regrant_without_give_back_is_a_violation() {
        let r = run(
            &[
                Granted { start: 1, end: 101 },
                GivenBack { start: 50, end: 90 }, // not the tail
                Granted { start: 50, end: 60 },
            ],
            101,
        );
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
    }

    #[test]
    fn a_watermark_below_a_grant_is_a_violation() {
        let r = run(&[Granted { start: 1, end: 101 }], 50);
        assert_eq!(r.violations.len(), 1);
        assert!(r.violations[0].message.contains("watermark is 50"));
    }

    #[test]
    fn an_unmatched_give_back_is_counted_not_a_violation() {
        let r = run(
            &[
                Checkpoint { below: 5, token: 0 },
                GivenBack { start: 5, end: 10 },
            ],
            5,
        );
        assert!(r.is_clean(), "{:?}", r.violations);
        assert_eq!((r.unmatched_give_backs, r.checkpoints), (1, 1));
    }

    /// The first of two merged grants pruned into a checkpoint: the give-back of the merged
    /// tail (starting in the pruned grant) and its re-grant are clean; without the checkpoint
    /// the same entries are not.
    #[test]
    fn a_give_back_into_a_checkpoint_is_clean() {
        let tail = [
            Granted {
                start: 1001,
                end: 2001,
            },
            GivenBack {
                start: 601,
                end: 2001,
            },
            Granted {
                start: 601,
                end: 1601,
            },
        ];
        let mut with = vec![Checkpoint {
            below: 1001,
            token: 0,
        }];
        with.extend(tail);
        let r = run(&with, 1601);
        assert!(r.is_clean(), "{:?}", r.violations);
        assert_eq!((r.give_backs, r.unmatched_give_backs), (1, 0));
        assert!(!run(&tail, 1601).is_clean());
    }

    #[test]
    fn a_checkpoint_covers_ids_below_it() {
        let r = run(
            &[
                Checkpoint {
                    below: 100,
                    token: 0,
                },
                Granted { start: 50, end: 60 },
            ],
            100,
        );
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].message.contains("[50, 60)"));
        // A checkpoint alone accounts for everything below the watermark.
        let r = run(
            &[Checkpoint {
                below: 100,
                token: 0,
            }],
            100,
        );
        assert!(r.is_clean(), "{:?}", r.violations);
        // A watermark below it is a violation, as below a grant.
        assert!(!run(
            &[Checkpoint {
                below: 100,
                token: 0
            }],
            90
        )
        .is_clean());
    }

    /// A namespace above its first id with no entry, or whose entries start above it with no
    /// checkpoint, is a violation; a fresh one is clean.
    #[test]
    fn nothing_is_not_proof() {
        let r = run(&[], 101);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].message.contains("[1, 101)"));
        assert!(run(&[], 1).is_clean());
        let r = run(&[Granted { start: 50, end: 60 }], 60);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].message.contains("[1, 50)"));
    }

    /// The checkpoint that pruning writes stands for what it replaces: verifying the
    /// checkpoint and the rest is as clean as verifying everything.
    #[test]
    fn a_checkpoint_stands_for_its_prefix() {
        let mut v = SubjectVerifier::new(ns("a"));
        for (i, e) in [
            Granted { start: 1, end: 101 },
            GivenBack {
                start: 51,
                end: 101,
            },
            Granted { start: 51, end: 80 },
        ]
        .iter()
        .enumerate()
        {
            v.add(&entry(i as u64 + 1, *e));
        }
        assert_eq!(
            v.checkpoint_event(),
            Checkpoint {
                below: 80,
                token: 0
            }
        );
        let mut g = SubjectVerifier::new(ns("g"));
        g.add(&entry(
            1,
            Leased {
                worker: 0,
                token: 7,
            },
        ));
        assert_eq!(g.checkpoint_event(), Checkpoint { below: 0, token: 7 });
    }

    /// After a checkpoint, tokens must still increase above its token; a token at or below
    /// it may be a lapsed lease re-established and cannot be told apart.
    #[test]
    fn tokens_continue_above_a_checkpoint() {
        let mut v = SubjectVerifier::new(ns("g"));
        v.add(&entry(1, Checkpoint { below: 0, token: 7 }));
        v.add(&entry(
            2,
            Leased {
                worker: 1,
                token: 3,
            },
        ));
        v.add(&entry(
            3,
            Leased {
                worker: 2,
                token: 8,
            },
        ));
        v.add(&entry(
            4,
            Leased {
                worker: 3,
                token: 8,
            },
        ));
        let r = v.finish(None);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    }

    #[test]
    fn tokens_must_increase() {
        let mut v = SubjectVerifier::new(ns("g"));
        v.add(&entry(
            1,
            Leased {
                worker: 0,
                token: 1,
            },
        ));
        v.add(&entry(
            2,
            Leased {
                worker: 1,
                token: 2,
            },
        ));
        v.add(&entry(
            3,
            Leased {
                worker: 0,
                token: 2,
            },
        ));
        let r = v.finish(None);
        assert_eq!(r.leases, 3);
        assert_eq!(r.violations.len(), 1);
    }

    /// A lease re-established (same worker, token and holder) is clean; the same token to
    /// another holder (a store that lost its records granted it again) is a violation.
    #[test]
    fn one_token_one_holder() {
        let leased = |seq: u64, worker: u64, token: u64, holder: &str| AuditEntry {
            holder: holder.into(),
            ..entry(seq, Leased { worker, token })
        };
        let mut v = SubjectVerifier::new(ns("g"));
        v.add(&leased(1, 0, 1, "a lease 1"));
        v.add(&leased(2, 1, 2, "b lease 2"));
        v.add(&leased(3, 0, 1, "a lease 1"));
        let r = v.finish(None);
        assert!(r.is_clean(), "{:?}", r.violations);
        assert_eq!(r.leases, 3);

        let mut v = SubjectVerifier::new(ns("g"));
        v.add(&leased(1, 0, 1, "a lease 1"));
        v.add(&leased(2, 0, 1, "c lease 9"));
        let r = v.finish(None);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].message.contains("two holders"));
    }

    #[test]
    fn out_of_order_seq_is_a_violation() {
        let mut v = SubjectVerifier::new(ns("a"));
        v.add(&entry(2, Granted { start: 1, end: 2 }));
        v.add(&entry(2, Granted { start: 2, end: 3 }));
        assert_eq!(v.finish(Some(&state(3))).violations.len(), 1);
    }

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
