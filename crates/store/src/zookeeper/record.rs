//! The text values of the ZooKeeper authority's znodes (format v1): a namespace's record, a
//! lease group's, a worker id's, a live znode's, and the store's incarnation. Pure functions:
//! encoding, and decoding that validates.
//!
//! ## Znodes (record format v1)
//!
//! Everything lives under [`ZookeeperConfig::root`](super::ZookeeperConfig::root) (default `/idmint`), which is created
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
//! A retired namespace's record ends in one more field, ` retired`, written by the same
//! `setData` that moves its watermark past the largest id (a live one's is unchanged, so older
//! versions still read it).
//!
//! Values are one line of text (readable with `zkCli.sh get`), fields in this order, numbers in
//! decimal without sign or leading zeros; the free-text field (layout, holder) comes last and
//! runs to the end. A value that is not exactly the canonical encoding of a valid record
//! (another version, edited by hand, a watermark outside `[first, max_id + 1]`, a child name
//! that is not a namespace or worker id) is [`StoreError::Corrupt`], never a panic.

use crate::lease::{GroupRecord, WorkerSlot};
use crate::{ops, Incarnation, NamespaceState, StoreError};
use idmint_core::{NamespaceName, Width};
use std::time::Duration;

/// The first field of a namespace record; the version of the record format.
const NS_FORMAT: &str = "idmint.ns/v1";
const GROUP_FORMAT: &str = "idmint.group/v1";
const WORKER_FORMAT: &str = "idmint.worker/v1";
const LIVE_FORMAT: &str = "idmint.live/v1";

/// The data of a live znode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Live {
    pub(super) token: u64,
    pub(super) ttl: Duration,
    pub(super) holder: String,
}

/// The store's incarnation as `<root>/incarnation` holds it; anything else is `Corrupt`.
pub(super) fn decode_incarnation(data: &[u8]) -> Result<Incarnation, StoreError> {
    let text = std::str::from_utf8(data).unwrap_or("");
    Incarnation::parse(text).map_err(|e| StoreError::Corrupt {
        message: format!("the store's incarnation: {e}"),
    })
}

pub(super) fn worker_id(group: &NamespaceName, child: &str) -> Result<u64, StoreError> {
    match child.parse::<u64>() {
        Ok(w) if w.to_string() == child => Ok(w),
        _ => Err(StoreError::Corrupt {
            message: format!("ZooKeeper lease group {group}: {child:?} is not a worker id"),
        }),
    }
}

pub(super) fn encode_ns(state: &NamespaceState) -> String {
    let spec = &state.spec;
    format!(
        "{NS_FORMAT} bits={} first={} step={} offset={} watermark={}{}",
        spec.width().bits(),
        spec.first(),
        spec.step(),
        spec.offset(),
        state.watermark,
        if state.retired { RETIRED_FIELD } else { "" }
    )
}

/// The last field of a retired namespace's record.
const RETIRED_FIELD: &str = " retired";

pub(super) fn encode_group(group: &GroupRecord) -> String {
    format!(
        "{GROUP_FORMAT} last_token={} layout={}",
        group.last_token, group.layout
    )
}

pub(super) fn encode_worker(slot: &WorkerSlot) -> String {
    format!(
        "{WORKER_FORMAT} token={} floor={} holder={}",
        slot.token, slot.floor_unix_ms, slot.holder
    )
}

pub(super) fn encode_live(live: &Live) -> String {
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

pub(super) fn decode_ns(name: &NamespaceName, raw: &[u8]) -> Result<NamespaceState, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("ZooKeeper record of namespace {name}: {what}"),
    };
    let (fixed, retired) = match raw.strip_suffix(RETIRED_FIELD.as_bytes()) {
        Some(fixed) => (fixed, true),
        None => (raw, false),
    };
    let (v, _) = fields(
        fixed,
        NS_FORMAT,
        &["bits", "first", "step", "offset", "watermark"],
        None,
    )
    .map_err(corrupt)?;
    let width = u32::try_from(v[0])
        .ok()
        .and_then(Width::from_bits)
        .ok_or_else(|| corrupt(format!("width {} is neither 32 nor 64", v[0])))?;
    let state =
        ops::stored_state(name.clone(), width, v[1], v[2], v[3], v[4], retired).map_err(corrupt)?;
    if encode_ns(&state).as_bytes() != raw {
        return Err(corrupt("not in canonical form".to_owned()));
    }
    Ok(state)
}

pub(super) fn decode_group(group: &NamespaceName, raw: &[u8]) -> Result<GroupRecord, StoreError> {
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

pub(super) fn decode_worker(
    group: &NamespaceName,
    worker: u64,
    raw: &[u8],
) -> Result<WorkerSlot, StoreError> {
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

pub(super) fn decode_live(
    group: &NamespaceName,
    worker: u64,
    raw: &[u8],
) -> Result<Live, StoreError> {
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
    use idmint_core::SequenceSpec;

    fn name() -> NamespaceName {
        NamespaceName::new("photos").unwrap()
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
                    retired: false,
                };
                assert_eq!(
                    decode_ns(&name(), encode_ns(&state).as_bytes()).unwrap(),
                    state
                );
            }
            let retired = NamespaceState {
                name: name(),
                spec,
                watermark: spec.width().max_id() + 1,
                retired: true,
            };
            let text = encode_ns(&retired);
            assert!(text.ends_with(" retired"), "{text}");
            assert_eq!(decode_ns(&name(), text.as_bytes()).unwrap(), retired);
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
                watermark: 1001,
                retired: false,
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
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1 retired",
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
