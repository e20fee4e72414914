//! The verifier of the audit ledger ([`verify`], [`SubjectVerifier`]): replays a subject's
//! entries in `seq` order and names what must never happen (the rules: [`super`]'s docs).
//!
//! It keeps the ids granted and not given back as disjoint, merged ranges, so its memory is the
//! number of gaps between live grants, not the number of entries. Reads only.

use super::{AuditEntry, AuditEvent, AuditLog};
use crate::{NamespaceState, StoreError};
use idmint_core::NamespaceName;
use std::collections::BTreeMap;

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
    /// Parked ranges not claimed yet, start → end.
    parked: BTreeMap<u64, u64>,
    /// Whether a checkpoint was read: a park it stands for is not in the ledger any more.
    checkpointed: bool,
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
            parked: BTreeMap::new(),
            checkpointed: false,
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
            // An operator's move drops the parked ids below it (a retirement: every one).
            if let AuditEvent::Rebased { to, .. } | AuditEvent::Retired { to, .. } = entry.event {
                self.parked.retain(|_, e| *e > to);
            }
            self.take(entry, start, end);
            return;
        }
        match entry.event {
            AuditEvent::Parked { start, end } => self.park(entry, start, end),
            AuditEvent::Claimed { start, end } => self.claim(entry, start, end),
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

    /// A park must hold ids granted and not given back, parked once.
    fn park(&mut self, entry: &AuditEntry, start: u64, end: u64) {
        let granted = self
            .live
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &e)| e >= end);
        if !granted {
            self.violation(format!(
                "entry {}: parks [{start}, {end}), which are not ids granted and not given back",
                entry.seq
            ));
        }
        if let Some((&s, &e)) = self.parked.range(..end).next_back() {
            if e > start {
                self.violation(format!(
                    "entry {}: parks [{start}, {end}), which overlaps [{s}, {e}) parked before                      and not claimed",
                    entry.seq
                ));
                return;
            }
        }
        self.parked.insert(start, end);
    }

    /// A claim must take back ids parked and not claimed before; what a rebase dropped of a
    /// park is not claimed.
    fn claim(&mut self, entry: &AuditEntry, start: u64, end: u64) {
        match self.parked.range(..=start).next_back().map(|(&s, &e)| (s, e)) {
            Some((s, e)) if e >= end => {
                self.parked.remove(&s);
            }
            // Its park may have been folded into a checkpoint.
            _ if self.checkpointed => {}
            _ => self.violation(format!(
                "entry {}: {} claims [{start}, {end}), which were not parked, or were claimed                  before: ids served twice",
                entry.seq, entry.holder
            )),
        }
    }

    fn note_lowest(&mut self, id: u64) {
        self.lowest = Some(self.lowest.map_or(id, |l| l.min(id)));
    }

    /// Everything below `below` is live from here on (the pruned entries granted it); live
    /// ranges above it stay.
    fn checkpoint(&mut self, below: u64, token: u64) {
        self.note_lowest(0);
        self.checkpointed = true;
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

    /// The violations found so far, without the checks of [`SubjectVerifier::finish`].
    pub fn into_violations(self) -> Vec<Violation> {
        self.report.violations
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
            retired: false,
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
    fn a_park_is_claimed_once() {
        let granted = [
            Granted { start: 1, end: 101 },
            Parked {
                start: 51,
                end: 101,
            },
        ];
        let once = [
            granted.as_slice(),
            &[Claimed {
                start: 51,
                end: 101,
            }],
        ]
        .concat();
        assert!(run(&once, 101).is_clean());
        let twice = [
            once.as_slice(),
            &[Claimed {
                start: 51,
                end: 101,
            }],
        ]
        .concat();
        assert_eq!(run(&twice, 101).violations.len(), 1);
        let unparked = [
            Granted { start: 1, end: 101 },
            Claimed { start: 1, end: 51 },
        ];
        assert_eq!(run(&unparked, 101).violations.len(), 1);
        // Parking ids that were given back (or never granted) is a violation.
        let given_back = [
            Granted { start: 1, end: 101 },
            GivenBack {
                start: 51,
                end: 101,
            },
            Parked {
                start: 51,
                end: 101,
            },
        ];
        assert_eq!(run(&given_back, 51).violations.len(), 1);
        // A retirement drops the park: claiming it after is a violation.
        let retired = [
            granted.as_slice(),
            &[
                Retired {
                    from: 101,
                    to: 1000,
                },
                Claimed {
                    start: 51,
                    end: 101,
                },
            ],
        ]
        .concat();
        assert_eq!(run(&retired, 1000).violations.len(), 1);
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
}
