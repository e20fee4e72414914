//! The file authority's tables and the byte layout of their records (versions 1 and 2). Pure
//! functions: encoding, and decoding that validates (a record this version did not write is
//! [`StoreError::Corrupt`], never a panic).
//!
//! ## On-disk format (versions 1 and 2)
//!
//! One redb table, `idmint.namespaces.v1`, keyed by the namespace name (`&str`, so redb keeps
//! it sorted by name), whose values are 34 bytes (version 1, a live namespace) or 35 (version
//! 2, a retired one):
//!
//! | bytes  | field                                        |
//! |--------|----------------------------------------------|
//! | 0      | record format version, `1` or `2`            |
//! | 1      | width in bits, `32` or `64`                  |
//! | 2..10  | `first`, u64 big-endian                      |
//! | 10..18 | `step`, u64 big-endian                       |
//! | 18..26 | `offset`, u64 big-endian                     |
//! | 26..34 | watermark, u64 big-endian                    |
//! | 34     | version 2 only: flags, `1` = retired         |
//!
//! The retired mark lives in the record whose watermark the retirement moves, so both are one
//! write; a live namespace keeps the version-1 record older idmint versions read.
//!
//! A record is valid when its length and version match, the name is a valid
//! [`NamespaceName`], `SequenceSpec::new(width, first, step, offset)` accepts the spec, and
//! `first <= watermark <= max_id + 1` (exactly `max_id + 1` when retired).
//!
//! `idmint.meta.v1` (`&str` keys and values) holds the store's incarnation under the key
//! `incarnation` ([`crate::incarnation`]), written once.
//!
//! The lease tables' records (`idmint.lease_groups.v1`, `idmint.worker_leases.v1`) are
//! described with the worker leases (`leases`).

use crate::lease::{GroupRecord, WorkerSlot};
use crate::{ops, Incarnation, NamespaceState, StoreError};
use idmint_core::{NamespaceName, Width};
use redb::TableDefinition;

pub(super) const NAMESPACES: TableDefinition<&str, &[u8]> =
    TableDefinition::new("idmint.namespaces.v1");
const RECORD_VERSION: u8 = 1;
const RECORD_LEN: usize = 34;
/// The version of a retired namespace's record: one flags byte more.
const RETIRED_VERSION: u8 = 2;
const RETIRED_FLAG: u8 = 1;
pub(super) const LEASE_GROUPS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("idmint.lease_groups.v1");
pub(super) const WORKER_LEASES: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("idmint.worker_leases.v1");
const LEASE_RECORD_VERSION: u8 = 1;
pub(super) const AUDIT: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("idmint.audit.v1");
pub(super) const AUDIT_SEQ: TableDefinition<&str, u64> =
    TableDefinition::new("idmint.audit_seq.v1");
/// Facts about the store itself: key `incarnation` ([`crate::incarnation`]).
/// Parked blocks per namespace ([`crate::parks`]), as [`crate::Parks::encode`]'s text; a
/// namespace without parks has no row.
pub(super) const PARKS: TableDefinition<&str, &str> = TableDefinition::new("idmint.parks.v1");
pub(super) const META: TableDefinition<&str, &str> = TableDefinition::new("idmint.meta.v1");
pub(super) const INCARNATION_KEY: &str = "incarnation";
pub(super) fn decode_incarnation(text: &str) -> Result<Incarnation, StoreError> {
    Incarnation::parse(text).map_err(|e| StoreError::Corrupt {
        message: format!("the store's incarnation: {e}"),
    })
}

pub(super) fn encode_group(record: &GroupRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + record.layout.len());
    out.push(LEASE_RECORD_VERSION);
    out.extend_from_slice(&record.last_token.to_be_bytes());
    out.extend_from_slice(record.layout.as_bytes());
    out
}

pub(super) fn decode_group(group: &str, bytes: &[u8]) -> Result<GroupRecord, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("lease group {group:?}: {what}"),
    };
    NamespaceName::new(group).map_err(|e| corrupt(format!("invalid name: {e}")))?;
    let (head, layout) = lease_head(bytes, 9).map_err(corrupt)?;
    let layout = std::str::from_utf8(layout)
        .map_err(|_| corrupt("the layout is not UTF-8".into()))?
        .to_owned();
    Ok(GroupRecord {
        layout,
        last_token: u64_at(head, 1),
    })
}

pub(super) fn encode_worker(slot: &WorkerSlot) -> Vec<u8> {
    let mut out = Vec::with_capacity(17 + slot.holder.len());
    out.push(LEASE_RECORD_VERSION);
    out.extend_from_slice(&slot.token.to_be_bytes());
    out.extend_from_slice(&slot.floor_unix_ms.to_be_bytes());
    out.extend_from_slice(slot.holder.as_bytes());
    out
}

pub(super) fn decode_worker(
    group: &str,
    worker: u64,
    bytes: &[u8],
) -> Result<WorkerSlot, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("lease of worker {worker} of group {group:?}: {what}"),
    };
    NamespaceName::new(group).map_err(|e| corrupt(format!("invalid group name: {e}")))?;
    let (head, holder) = lease_head(bytes, 17).map_err(corrupt)?;
    let token = u64_at(head, 1);
    if token == 0 {
        return Err(corrupt("token 0 is never granted".into()));
    }
    let holder = std::str::from_utf8(holder)
        .map_err(|_| corrupt("the holder is not UTF-8".into()))?
        .to_owned();
    Ok(WorkerSlot {
        worker,
        token,
        holder,
        floor_unix_ms: u64_at(head, 9),
        expires_in: None,
    })
}

/// Splits a lease record into its fixed `head` (version checked) and its text tail.
fn lease_head(bytes: &[u8], head: usize) -> Result<(&[u8], &[u8]), String> {
    if bytes.len() < head {
        return Err(format!(
            "record is {} bytes long, expected at least {head}",
            bytes.len()
        ));
    }
    if bytes[0] != LEASE_RECORD_VERSION {
        return Err(format!(
            "record format version {} is not {LEASE_RECORD_VERSION} (written by another \
             idmint version?)",
            bytes[0]
        ));
    }
    Ok(bytes.split_at(head))
}

/// The u64 big-endian at `i` of `bytes` (`bytes` is at least `i + 8` long).
fn u64_at(bytes: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[i..i + 8]);
    u64::from_be_bytes(b)
}

pub(super) fn encode(state: &NamespaceState) -> Vec<u8> {
    let spec = &state.spec;
    let mut out = vec![0u8; RECORD_LEN];
    out[0] = RECORD_VERSION;
    // Width::bits() is 32 or 64: it fits a byte.
    out[1] = if spec.width() == Width::Bits32 {
        32
    } else {
        64
    };
    out[2..10].copy_from_slice(&spec.first().to_be_bytes());
    out[10..18].copy_from_slice(&spec.step().to_be_bytes());
    out[18..26].copy_from_slice(&spec.offset().to_be_bytes());
    out[26..34].copy_from_slice(&state.watermark.to_be_bytes());
    if state.retired {
        out[0] = RETIRED_VERSION;
        out.push(RETIRED_FLAG);
    }
    out
}

pub(super) fn decode(key: &str, bytes: &[u8]) -> Result<NamespaceState, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("namespace {key:?}: {what}"),
    };
    let name = NamespaceName::new(key).map_err(|e| corrupt(format!("invalid name: {e}")))?;
    let (len, retired) = match bytes.first() {
        Some(&RECORD_VERSION) => (RECORD_LEN, false),
        Some(&RETIRED_VERSION) => (RECORD_LEN + 1, true),
        Some(v) => {
            return Err(corrupt(format!(
                "record format version {v} is neither {RECORD_VERSION} nor {RETIRED_VERSION} \
                 (written by another idmint version?)"
            )))
        }
        None => return Err(corrupt("record is empty".into())),
    };
    if bytes.len() != len {
        return Err(corrupt(format!(
            "record is {} bytes long, expected {len}",
            bytes.len()
        )));
    }
    if retired && bytes[RECORD_LEN] != RETIRED_FLAG {
        return Err(corrupt(format!("unknown flags {}", bytes[RECORD_LEN])));
    }
    let width = Width::from_bits(u32::from(bytes[1]))
        .ok_or_else(|| corrupt(format!("width {} is neither 32 nor 64", bytes[1])))?;
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i..i + 8]);
        u64::from_be_bytes(b)
    };
    let (first, step, offset, watermark) = (u64_at(2), u64_at(10), u64_at(18), u64_at(26));
    ops::stored_state(name, width, first, step, offset, watermark, retired).map_err(corrupt)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::SequenceSpec;

    fn state(name: &str, spec: SequenceSpec, watermark: u64) -> NamespaceState {
        NamespaceState {
            name: NamespaceName::new(name).unwrap(),
            spec,
            watermark,
            retired: false,
        }
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
                let s = state("photos", spec, watermark);
                assert_eq!(decode("photos", &encode(&s)).unwrap(), s);
            }
            let retired = NamespaceState {
                retired: true,
                ..state("photos", spec, spec.width().max_id() + 1)
            };
            let bytes = encode(&retired);
            assert_eq!((bytes[0], bytes.len()), (2, 35));
            assert_eq!(decode("photos", &bytes).unwrap(), retired);
        }
    }

    #[test]
    fn damaged_records_are_corrupt_not_panics() {
        let good = encode(&state(
            "n",
            SequenceSpec::new(Width::Bits32, 10, 4, 2).unwrap(),
            10,
        ));
        let mut cases: Vec<Vec<u8>> =
            vec![Vec::new(), good[..33].to_vec(), [&good[..], &[0]].concat()];
        let mut bad = |i: usize, v: u8| {
            let mut b = good.to_vec();
            b[i] = v;
            cases.push(b);
        };
        bad(0, 3); // version
        bad(0, 2); // version 2 is 35 bytes long
        bad(1, 16); // width
        bad(17, 0); // step 0
        bad(25, 9); // offset >= step
        bad(33, 9); // watermark below first
        bad(26, 0xff); // watermark far above the 32-bit ceiling
        let mut retired_below = [&good[..], &[1]].concat();
        retired_below[0] = 2; // retired, but the watermark is not past the largest id
        cases.push(retired_below);
        for case in &cases {
            assert!(
                matches!(decode("n", case), Err(StoreError::Corrupt { .. })),
                "{case:?}"
            );
        }
        assert!(matches!(
            decode("-bad", &good),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn lease_records_round_trip_and_damage_is_corrupt() {
        let record = GroupRecord {
            layout: "timestamp_bits=41 node_bits=2".into(),
            last_token: 9,
        };
        assert_eq!(decode_group("g", &encode_group(&record)).unwrap(), record);
        let slot = WorkerSlot {
            worker: 3,
            token: 9,
            holder: "host pid=1".into(),
            floor_unix_ms: 1_700_000_000_000,
            expires_in: None,
        };
        assert_eq!(decode_worker("g", 3, &encode_worker(&slot)).unwrap(), slot);
        let good = encode_worker(&slot);
        let mut bad_version = good.clone();
        bad_version[0] = 2;
        let mut zero_token = good.clone();
        zero_token[1..9].copy_from_slice(&[0; 8]);
        let not_utf8 = [&good[..17], &[0xff][..]].concat();
        for case in [
            &good[..16],
            &bad_version[..],
            &zero_token[..],
            &not_utf8[..],
        ] {
            assert!(
                matches!(decode_worker("g", 3, case), Err(StoreError::Corrupt { .. })),
                "{case:?}"
            );
        }
        assert!(matches!(
            decode_group("g", &[1, 0, 0]),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            decode_group("-bad", &encode_group(&record)),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
