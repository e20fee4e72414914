//! Parked blocks: unused blocks a node held at a clean stop, recorded in the store that granted
//! them under a random claim key, so that the node (and only it, once) can claim them back
//! after its restart and serve them ([`crate::Authority::park`], [`crate::Authority::claim`]).
//!
//! A node's data directory says which key to claim with (`crate::kept`); the store says
//! what the key holds. So nothing a node reads from its own disk yields ids by itself:
//!
//! - **parked by the holder**: a park is written by the node that holds the blocks, at its
//!   clean stop, after its give-back's outcome is known (an unknown give-back burns its tail,
//!   it is never parked); every block lies below the namespace's watermark, in its residue
//!   class, and overlaps no other park;
//! - **claimed once**: a claim removes the park in the same atomic write that answers it (and
//!   records the claim in the audit ledger), so a second claim of the key (a copied or restored
//!   data directory) is [`StoreError::NotParked`]; the blocks a claim returns are the store's,
//!   not the file's, so an edited file cannot name ranges;
//! - **never above an operator's move**: a rebase drops every parked id below its target,
//!   and a retirement drops every park of the namespace, in the same atomic write as the move;
//!   a claim of a retired namespace is [`StoreError::Retired`];
//! - **the store's incarnation**: an emptied or replaced store holds no park, so a claim there
//!   is refused (and the node record refuses such a store before any claim).
//!
//! Each backend stores a namespace's parks next to its record as [`Parks::encode`]'s text and
//! decides every change with the pure functions below, inside its own atomic
//! read-modify-write, as it does with `ops`.

use crate::{NamespaceState, StoreError};
use idmint_core::{Block, NamespaceName};

/// The random key a park is claimed with: 32 lowercase hex digits (128 bits from the operating
/// system's CSPRNG).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClaimKey(String);

impl ClaimKey {
    /// A new random key.
    pub fn random() -> ClaimKey {
        use rand::RngCore;
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        ClaimKey(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// A key read back from a file or a store; `None` unless 32 lowercase hex digits.
    pub fn parse(text: &str) -> Option<ClaimKey> {
        (text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| ClaimKey(text.to_owned()))
    }

    /// Its text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The key is a capability: it is never printed whole.
impl std::fmt::Debug for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClaimKey({}…)", &self.0[..4.min(self.0.len())])
    }
}

/// One park: the blocks recorded under one key, increasing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Park {
    /// What claims it.
    pub key: ClaimKey,
    /// Its blocks, increasing and disjoint.
    pub blocks: Vec<Block>,
}

/// Every park of one namespace, as a backend stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parks(Vec<Park>);

impl Parks {
    /// No park.
    pub fn none() -> Parks {
        Parks(Vec::new())
    }

    /// Whether there is no park.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The parks.
    pub fn iter(&self) -> impl Iterator<Item = &Park> {
        self.0.iter()
    }

    /// The stored text: parks separated by `;`, each its key then its blocks as `start-end`,
    /// separated by spaces (`"3f…9a 101-201 301-1001"`); the empty string for none.
    pub fn encode(&self) -> String {
        self.0
            .iter()
            .map(|p| {
                let mut s = p.key.0.clone();
                for b in &p.blocks {
                    s.push_str(&format!(" {}-{}", b.start(), b.end()));
                }
                s
            })
            .collect::<Vec<_>>()
            .join(";")
    }

    /// Reads [`Parks::encode`]'s text for a namespace whose ids are `step` apart; the error
    /// says what is wrong (backends wrap it in [`StoreError::Corrupt`] with the place).
    pub fn decode(text: &str, step: u64) -> Result<Parks, String> {
        let mut parks = Vec::new();
        for part in text.split(';').filter(|p| !p.trim().is_empty()) {
            let mut fields = part.split_whitespace();
            let key = fields
                .next()
                .and_then(ClaimKey::parse)
                .ok_or_else(|| format!("parked blocks {part:?}: no claim key"))?;
            let mut blocks = Vec::new();
            for range in fields {
                let block = range
                    .split_once('-')
                    .and_then(|(s, e)| Some((s.parse().ok()?, e.parse().ok()?)))
                    .and_then(|(s, e)| Block::new(s, e, step))
                    .ok_or_else(|| format!("parked blocks {part:?}: {range:?} is not a block"))?;
                blocks.push(block);
            }
            if blocks.is_empty() {
                return Err(format!("parked blocks {part:?}: no block"));
            }
            parks.push(Park { key, blocks });
        }
        Ok(Parks(parks))
    }

    /// The parks after `blocks` are parked under `key` on a namespace in `state`: each block
    /// of the namespace's spec, below its watermark, overlapping no parked block; the
    /// namespace not retired; the key not in use.
    pub fn park(
        &self,
        state: &NamespaceState,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<Parks, StoreError> {
        if state.retired {
            return Err(StoreError::Retired {
                name: state.name.clone(),
            });
        }
        let invalid = |block: &Block, reason: &'static str| StoreError::InvalidTail {
            name: state.name.clone(),
            start: block.start(),
            end: block.end(),
            step: block.step(),
            reason,
        };
        let spec = &state.spec;
        let mut above = 0;
        for block in blocks {
            if block.step() != spec.step()
                || !spec.contains(block.start())
                || !spec.contains(block.last())
            {
                return Err(invalid(block, "it is not a block of the namespace's spec"));
            }
            if block.end() > state.watermark {
                return Err(invalid(block, "it lies above the namespace's watermark"));
            }
            if block.start() < above {
                return Err(invalid(block, "the blocks are not increasing"));
            }
            above = block.end();
            let overlaps = self
                .0
                .iter()
                .flat_map(|p| &p.blocks)
                .any(|b| b.start() < block.end() && block.start() < b.end());
            if overlaps {
                return Err(invalid(block, "it overlaps blocks parked before"));
            }
        }
        if blocks.is_empty() || self.0.iter().any(|p| &p.key == key) {
            return Err(StoreError::InvalidSetup {
                message: format!(
                    "parking blocks of namespace {}: nothing to park, or the claim key is in use",
                    state.name
                ),
            });
        }
        let mut next = self.clone();
        next.0.push(Park {
            key: key.clone(),
            blocks: blocks.to_vec(),
        });
        Ok(next)
    }

    /// The parks after the park of `key` is claimed, and its blocks; [`StoreError::Retired`]
    /// for a retired namespace, [`StoreError::NotParked`] when no park has the key.
    pub fn claim(
        &self,
        state: &NamespaceState,
        key: &ClaimKey,
    ) -> Result<(Parks, Vec<Block>), StoreError> {
        if state.retired {
            return Err(StoreError::Retired {
                name: state.name.clone(),
            });
        }
        let at =
            self.0
                .iter()
                .position(|p| &p.key == key)
                .ok_or_else(|| StoreError::NotParked {
                    name: state.name.clone(),
                })?;
        let mut next = self.clone();
        let park = next.0.remove(at);
        Ok((next, park.blocks))
    }

    /// The parks after a forward-only move that left the namespace in `after` with target
    /// `to` ([`crate::Authority::advance`]): none for a retired namespace; otherwise each
    /// block keeps only its ids at or above `to`.
    pub fn after_advance(&self, after: &NamespaceState, to: u64) -> Parks {
        if after.retired {
            return Parks::none();
        }
        let parks = self
            .0
            .iter()
            .filter_map(|p| {
                let blocks: Vec<Block> = p
                    .blocks
                    .iter()
                    .filter_map(|b| at_or_above(*b, to))
                    .collect();
                (!blocks.is_empty()).then(|| Park {
                    key: p.key.clone(),
                    blocks,
                })
            })
            .collect();
        Parks(parks)
    }
}

#[cfg_attr(
    not(any(
        feature = "etcd",
        feature = "zookeeper",
        feature = "redis",
        feature = "mysql"
    )),
    allow(unused_imports)
)]
pub(crate) use decide::{decide_advance, decide_claim, decide_park, Change};

/// The decisions of the backends that read a namespace's record and parks and write both back
/// in one write (MySQL, Redis, ZooKeeper); unused in a build without them.
#[cfg_attr(
    not(any(
        feature = "etcd",
        feature = "zookeeper",
        feature = "redis",
        feature = "mysql"
    )),
    allow(dead_code, unused_imports)
)]
mod decide {
    use super::{events, ClaimKey, Parks};
    use crate::{NamespaceState, StoreError};
    use idmint_core::Block;

    /// What one atomic write of a namespace's record and parks writes and answers, as the
    /// backends that read both and write them back in one write (MySQL, Redis, etcd, ZooKeeper)
    /// take it from the `decide_*` functions below.
    pub(crate) struct Change<T> {
        /// The record after the write.
        pub(crate) state: NamespaceState,
        /// The parks after the write.
        pub(crate) parks: Parks,
        /// The audit entries recording it, in order.
        pub(crate) events: Vec<crate::AuditEvent>,
        /// The answer.
        pub(crate) answer: T,
    }

    impl<T> Change<T> {
        /// Whether the write changes nothing (then it is not made).
        pub(crate) fn writes_nothing(&self, state: &NamespaceState, parks: &Parks) -> bool {
            self.events.is_empty() && &self.state == state && &self.parks == parks
        }
    }

    /// [`crate::Authority::park`] on a namespace in `state` with `parks`.
    pub(crate) fn decide_park(
        state: &NamespaceState,
        parks: &Parks,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<Change<()>, StoreError> {
        Ok(Change {
            state: state.clone(),
            parks: parks.park(state, key, blocks)?,
            events: events(blocks, false),
            answer: (),
        })
    }

    /// [`crate::Authority::claim`] on a namespace in `state` with `parks`.
    pub(crate) fn decide_claim(
        state: &NamespaceState,
        parks: &Parks,
        key: &ClaimKey,
    ) -> Result<Change<Vec<Block>>, StoreError> {
        let (next, blocks) = parks.claim(state, key)?;
        Ok(Change {
            state: state.clone(),
            parks: next,
            events: events(&blocks, true),
            answer: blocks,
        })
    }

    /// [`crate::Authority::advance`] on a namespace in `state` with `parks`: the move
    /// (`ops::advance`, with its entry) and the parks it leaves ([`Parks::after_advance`]).
    pub(crate) fn decide_advance(
        state: &NamespaceState,
        parks: &Parks,
        to: u64,
        why: crate::Advance,
    ) -> Result<Change<crate::Advanced>, StoreError> {
        let from = state.watermark;
        let (next, events) = match crate::ops::advance(state, to, why)? {
            Some(next) => {
                let event = crate::ops::advance_event(why, from, next.watermark);
                (next, vec![event])
            }
            None => (state.clone(), Vec::new()),
        };
        Ok(Change {
            parks: parks.after_advance(&next, to),
            events,
            answer: crate::Advanced {
                from,
                state: next.clone(),
            },
            state: next,
        })
    }
}

/// The ids of `block` at or above `to`, if any.
fn at_or_above(block: Block, to: u64) -> Option<Block> {
    if block.start() >= to {
        return Some(block);
    }
    if block.last() < to {
        return None;
    }
    let below = (to - block.start()).div_ceil(block.step());
    block.split_first(below).1
}

/// The audit events of a park or a claim of `blocks` (`claimed` false: parked).
pub(crate) fn events(blocks: &[Block], claimed: bool) -> Vec<crate::AuditEvent> {
    blocks
        .iter()
        .map(|b| {
            let (start, end) = (b.start(), b.end());
            if claimed {
                crate::AuditEvent::Claimed { start, end }
            } else {
                crate::AuditEvent::Parked { start, end }
            }
        })
        .collect()
}

/// The corrupt-record error of parks that do not decode.
pub(crate) fn corrupt(name: &NamespaceName, reason: String) -> StoreError {
    StoreError::Corrupt {
        message: format!("namespace {name}: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::{SequenceSpec, Width};

    fn state(watermark: u64) -> NamespaceState {
        let mut s = NamespaceState::new(
            NamespaceName::new("orders").unwrap(),
            SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap(),
        );
        s.watermark = watermark;
        s
    }

    fn block(s: u64, e: u64) -> Block {
        Block::new(s, e, 2).unwrap()
    }

    #[test]
    fn a_park_is_claimed_once_and_round_trips() {
        let key = ClaimKey::random();
        let parks = Parks::none()
            .park(&state(1001), &key, &[block(101, 201), block(301, 1001)])
            .unwrap();
        let decoded = Parks::decode(&parks.encode(), 2).unwrap();
        assert_eq!(decoded, parks);
        let (after, blocks) = decoded.claim(&state(1001), &key).unwrap();
        assert_eq!(blocks, vec![block(101, 201), block(301, 1001)]);
        assert!(after.is_empty());
        assert!(matches!(
            after.claim(&state(1001), &key),
            Err(StoreError::NotParked { .. })
        ));
        assert!(matches!(
            parks.claim(&state(1001), &ClaimKey::random()),
            Err(StoreError::NotParked { .. })
        ));
    }

    #[test]
    fn only_granted_blocks_of_the_spec_are_parked_once() {
        let key = ClaimKey::random();
        let s = state(1001);
        let none = Parks::none();
        for bad in [
            vec![block(101, 1003)],                 // above the watermark
            vec![block(102, 202)],                  // not of the residue class
            vec![Block::new(101, 201, 4).unwrap()], // another step
            vec![block(301, 401), block(101, 201)], // not increasing
            vec![],
        ] {
            assert!(none.park(&s, &key, &bad).is_err(), "{bad:?}");
        }
        let parked = none.park(&s, &key, &[block(101, 201)]).unwrap();
        assert!(parked
            .park(&s, &ClaimKey::random(), &[block(151, 301)])
            .is_err());
        assert!(parked.park(&s, &key, &[block(501, 601)]).is_err());
        let mut retired = s.clone();
        retired.retired = true;
        assert!(matches!(
            none.park(&retired, &key, &[block(101, 201)]),
            Err(StoreError::Retired { .. })
        ));
        assert!(matches!(
            parked.claim(&retired, &key),
            Err(StoreError::Retired { .. })
        ));
    }

    #[test]
    fn a_rebase_drops_parked_ids_below_it_and_a_retirement_all() {
        let key = ClaimKey::random();
        let s = state(1001);
        let parks = Parks::none()
            .park(&s, &key, &[block(101, 201), block(301, 1001)])
            .unwrap();
        let (_, blocks) = parks.after_advance(&s, 400).claim(&s, &key).unwrap();
        assert_eq!(blocks, vec![block(401, 1001)]);
        assert!(parks.after_advance(&s, 2000).is_empty());
        let mut retired = s.clone();
        retired.retired = true;
        assert!(parks.after_advance(&retired, 0).is_empty());
        assert_eq!(parks.after_advance(&s, 50), parks);
    }

    #[test]
    fn damaged_text_is_an_error_and_keys_are_not_printed() {
        for bad in [
            "nokey 1-3",
            "0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdef 5-3",
        ] {
            assert!(Parks::decode(bad, 2).is_err(), "{bad}");
        }
        assert!(Parks::decode("", 2).unwrap().is_empty());
        let key = ClaimKey::random();
        assert!(!format!("{key:?}").contains(key.as_str()));
    }
}
