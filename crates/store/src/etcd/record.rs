//! The text values of the etcd authority's keys (format v1): a namespace's record, and a
//! lease group's, a worker id's and a live key's (whose keys `leases` describes). Pure
//! functions: encoding, and decoding that validates.
//!
//! ## Keys and values (record format v1)
//!
//! One key per namespace, `<prefix>ns/<name>` (prefix
//! [`EtcdConfig::prefix`](super::EtcdConfig::prefix), default `/idmint/`, so
//! `/idmint/ns/photos`), whose value is one line of ASCII text:
//!
//! ```text
//! idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001
//! ```
//!
//! A retired namespace's line ends in one more field, ` retired`, written by the same put that
//! moves its watermark past the largest id (a live one's line is unchanged, so older versions
//! still read it):
//!
//! ```text
//! idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=9223372036854775808 retired
//! ```
//!
//! The fields are always all present, in this order, separated by single spaces, numbers in
//! decimal without sign or leading zeros. A value is valid when it is exactly the canonical
//! encoding of a state whose spec `SequenceSpec::new(width, first, step, offset)` accepts and
//! whose watermark lies in `[first, max_id + 1]`; anything else (another version, a value
//! edited by hand, a key under the prefix whose suffix is not a namespace name) is
//! [`StoreError::Corrupt`], never a panic. Text, so that `etcdctl get --prefix /idmint/` is
//! readable.
//!
//! The lease values have the same shape, `<format> <key>=<number> … <last>=<text>`: the
//! numbers in decimal without sign or leading zeros, the last field the rest of the line. A
//! value is valid only in its canonical encoding.

use crate::lease::{GroupRecord, WorkerSlot};
use crate::{ops, Incarnation, NamespaceState, StoreError};
use idmint_core::{NamespaceName, Width};
use idmint_proto::etcd::mvccpb::KeyValue;
use std::time::Duration;

/// The first field of every namespace record; the version of the record format.
const FORMAT: &str = "idmint.ns/v1";
/// The first field of a lease group's record.
const GROUP_FORMAT: &str = "idmint.lease-group/v1";
/// The first field of a worker id's durable record.
const WORKER_FORMAT: &str = "idmint.worker/v1";
/// The first field of a worker id's live key.
const LIVE_FORMAT: &str = "idmint.live/v1";

/// A worker id's durable record as read, with its `mod_revision`.
#[derive(Debug, Clone)]
pub(super) struct RecordRead {
    pub(super) slot: WorkerSlot,
    pub(super) mod_revision: i64,
}

/// A worker id's live key as read.
#[derive(Debug, Clone)]
pub(super) struct LiveRead {
    pub(super) token: u64,
    pub(super) ttl_secs: u64,
    pub(super) lease_id: i64,
    pub(super) mod_revision: i64,
}

pub(super) fn parse_worker(
    group: &NamespaceName,
    key: &str,
    text: &str,
) -> Result<u64, StoreError> {
    match text.parse::<u64>() {
        Ok(worker) if worker.to_string() == text => Ok(worker),
        _ => Err(StoreError::Corrupt {
            message: format!("etcd key {key:?} of lease group {group} names no worker id"),
        }),
    }
}

pub(super) fn live_without_record(group: &NamespaceName, worker: u64, token: u64) -> StoreError {
    StoreError::Corrupt {
        message: format!(
            "lease group {group}: the live key of worker {worker} (token {token}) does not \
             match its record"
        ),
    }
}

/// Parses `<format> <key>=<u64> … <last>=<text>`: the numbers of `keys`, then the text after
/// `last=`.
fn lease_fields<'a, const N: usize>(
    text: &'a str,
    format: &str,
    keys: [&str; N],
    last: &str,
) -> Result<([u64; N], &'a str), String> {
    let mut rest = text
        .strip_prefix(format)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| {
            format!("does not start with {format:?} (written by another idmint version?)")
        })?;
    let mut numbers = [0u64; N];
    for (key, number) in keys.iter().zip(numbers.iter_mut()) {
        let (field, tail) = rest
            .split_once(' ')
            .ok_or_else(|| format!("field {key} is missing"))?;
        let value = field
            .strip_prefix(key)
            .and_then(|f| f.strip_prefix('='))
            .ok_or_else(|| format!("field {key} is missing or out of place"))?;
        *number = value
            .parse::<u64>()
            .map_err(|_| format!("field {key}={value} is not a number"))?;
        rest = tail;
    }
    let tail = rest
        .strip_prefix(last)
        .and_then(|r| r.strip_prefix('='))
        .ok_or_else(|| format!("field {last} is missing or out of place"))?;
    Ok((numbers, tail))
}

fn lease_text<'a>(
    raw: &'a [u8],
    what: &dyn Fn(String) -> StoreError,
) -> Result<&'a str, StoreError> {
    std::str::from_utf8(raw).map_err(|_| what("not UTF-8 text".to_owned()))
}

pub(super) fn encode_group(record: &GroupRecord) -> String {
    format!(
        "{GROUP_FORMAT} last_token={} layout={}",
        record.last_token, record.layout
    )
}

pub(super) fn decode_group(group: &NamespaceName, raw: &[u8]) -> Result<GroupRecord, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd record of lease group {group}: {what}"),
    };
    let text = lease_text(raw, &corrupt)?;
    let ([last_token], layout) =
        lease_fields(text, GROUP_FORMAT, ["last_token"], "layout").map_err(corrupt)?;
    let record = GroupRecord {
        layout: layout.to_owned(),
        last_token,
    };
    if encode_group(&record) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    Ok(record)
}

pub(super) fn encode_record(slot: &WorkerSlot) -> String {
    format!(
        "{WORKER_FORMAT} token={} floor={} holder={}",
        slot.token, slot.floor_unix_ms, slot.holder
    )
}

pub(super) fn decode_record(
    group: &NamespaceName,
    worker: u64,
    kv: &KeyValue,
) -> Result<RecordRead, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd record of worker {worker} of lease group {group}: {what}"),
    };
    let text = lease_text(&kv.value, &corrupt)?;
    let ([token, floor_unix_ms], holder) =
        lease_fields(text, WORKER_FORMAT, ["token", "floor"], "holder").map_err(corrupt)?;
    let slot = WorkerSlot {
        worker,
        token,
        holder: holder.to_owned(),
        floor_unix_ms,
        expires_in: None,
    };
    if slot.token == 0 {
        return Err(corrupt("token 0 is never granted".to_owned()));
    }
    if encode_record(&slot) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    Ok(RecordRead {
        slot,
        mod_revision: kv.mod_revision,
    })
}

pub(super) fn encode_live(token: u64, ttl: Duration, holder: &str) -> String {
    format!(
        "{LIVE_FORMAT} token={token} ttl={} holder={holder}",
        ttl.as_secs()
    )
}

pub(super) fn decode_live(
    group: &NamespaceName,
    worker: u64,
    kv: &KeyValue,
) -> Result<LiveRead, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd live key of worker {worker} of lease group {group}: {what}"),
    };
    let text = lease_text(&kv.value, &corrupt)?;
    let ([token, ttl_secs], holder) =
        lease_fields(text, LIVE_FORMAT, ["token", "ttl"], "holder").map_err(corrupt)?;
    if encode_live(token, Duration::from_secs(ttl_secs), holder) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    if kv.lease == 0 {
        return Err(corrupt("not attached to an etcd lease".to_owned()));
    }
    Ok(LiveRead {
        token,
        ttl_secs,
        lease_id: kv.lease,
        mod_revision: kv.mod_revision,
    })
}

pub(super) fn decode_incarnation(bytes: &[u8]) -> Result<Incarnation, StoreError> {
    let text = std::str::from_utf8(bytes).unwrap_or("");
    Incarnation::parse(text).map_err(|e| StoreError::Corrupt {
        message: format!("the store's incarnation: {e}"),
    })
}

pub(super) fn encode(state: &NamespaceState) -> String {
    let spec = &state.spec;
    format!(
        "{FORMAT} bits={} first={} step={} offset={} watermark={}{}",
        spec.width().bits(),
        spec.first(),
        spec.step(),
        spec.offset(),
        state.watermark,
        if state.retired { " retired" } else { "" }
    )
}

pub(super) fn decode(name: &NamespaceName, raw: &[u8]) -> Result<NamespaceState, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd record of namespace {name}: {what}"),
    };
    let text = std::str::from_utf8(raw).map_err(|_| corrupt("not UTF-8 text".to_owned()))?;
    let mut fields = text.split(' ');
    if fields.next() != Some(FORMAT) {
        return Err(corrupt(format!(
            "does not start with {FORMAT:?} (written by another idmint version?)"
        )));
    }
    let mut field = |key: &str| -> Result<u64, StoreError> {
        let value = fields
            .next()
            .and_then(|f| f.strip_prefix(key))
            .and_then(|f| f.strip_prefix('='))
            .ok_or_else(|| corrupt(format!("field {key} is missing or out of place")))?;
        value
            .parse::<u64>()
            .map_err(|_| corrupt(format!("field {key}={value} is not a number")))
    };
    let bits = field("bits")?;
    let (first, step, offset, watermark) = (
        field("first")?,
        field("step")?,
        field("offset")?,
        field("watermark")?,
    );
    let retired = match fields.next() {
        None => false,
        Some("retired") => true,
        Some(other) => return Err(corrupt(format!("unknown field {other:?} after watermark"))),
    };
    if fields.next().is_some() {
        return Err(corrupt("has fields after retired".to_owned()));
    }
    let width = u32::try_from(bits)
        .ok()
        .and_then(Width::from_bits)
        .ok_or_else(|| corrupt(format!("width {bits} is neither 32 nor 64")))?;
    let state = ops::stored_state(name.clone(), width, first, step, offset, watermark, retired)
        .map_err(corrupt)?;
    if encode(&state) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    Ok(state)
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
    fn records_round_trip_and_read_clearly() {
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
                assert_eq!(decode(&name(), encode(&state).as_bytes()).unwrap(), state);
            }
        }
        let state = NamespaceState {
            name: name(),
            spec: SequenceSpec::default_64(),
            watermark: 1001,
            retired: false,
        };
        assert_eq!(
            encode(&state),
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001"
        );
        let retired = NamespaceState {
            watermark: 1 << 63,
            retired: true,
            ..state.clone()
        };
        assert_eq!(
            encode(&retired),
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=9223372036854775808 retired"
        );
        assert_eq!(
            decode(&name(), encode(&retired).as_bytes()).unwrap(),
            retired
        );
        // Retired below the ceiling, or an unknown trailing field, is corrupt.
        for bad in [
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001 retired",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001 gone",
        ] {
            assert!(matches!(
                decode(&name(), bad.as_bytes()),
                Err(StoreError::Corrupt { .. })
            ));
        }
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
            "idmint.ns/v1 bits=64 first=1 step=2 offset=2 watermark=1",
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
                    decode(&name(), raw.as_bytes()),
                    Err(StoreError::Corrupt { .. })
                ),
                "{raw:?} was accepted"
            );
        }
        let invalid_utf8 = [0xff, 0xfe];
        assert!(matches!(
            decode(&name(), &invalid_utf8),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn lease_records_round_trip_and_damage_is_corrupt() {
        let record = GroupRecord {
            layout: "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=1ms epoch=0".into(),
            last_token: 7,
        };
        let text = encode_group(&record);
        assert_eq!(
            text,
            "idmint.lease-group/v1 last_token=7 layout=timestamp_bits=41 node_bits=2 \
             sequence_bits=12 unit=1ms epoch=0"
        );
        assert_eq!(decode_group(&name(), text.as_bytes()).unwrap(), record);
        let bad = [
            "",
            "idmint.lease-group/v2 last_token=7 layout=L",
            "idmint.lease-group/v1 last_token=07 layout=L",
            "idmint.lease-group/v1 layout=L",
            "idmint.lease-group/v1 last_token=x layout=L",
        ];
        for raw in bad {
            assert!(
                matches!(
                    decode_group(&name(), raw.as_bytes()),
                    Err(StoreError::Corrupt { .. })
                ),
                "{raw:?} was accepted"
            );
        }
        let slot = WorkerSlot {
            worker: 2,
            token: 7,
            holder: "host a b".into(),
            floor_unix_ms: 1_700_000_005_000,
            expires_in: None,
        };
        assert_eq!(
            encode_record(&slot),
            "idmint.worker/v1 token=7 floor=1700000005000 holder=host a b"
        );
        let text = encode_record(&slot);
        let (numbers, holder) =
            lease_fields(&text, WORKER_FORMAT, ["token", "floor"], "holder").unwrap();
        assert_eq!((numbers, holder), ([7, 1_700_000_005_000], "host a b"));
        assert!(lease_fields(
            "idmint.worker/v1 floor=1 token=7 holder=h",
            WORKER_FORMAT,
            ["token", "floor"],
            "holder"
        )
        .is_err());
        assert_eq!(
            encode_live(7, Duration::from_secs(60), "h"),
            "idmint.live/v1 token=7 ttl=60 holder=h"
        );
        assert!(parse_worker(&name(), "k", "3").is_ok());
        for bad in ["03", "-1", "x", ""] {
            assert!(parse_worker(&name(), "k", bad).is_err(), "{bad:?}");
        }
    }
}
