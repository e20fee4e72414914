//! `GET /v1/decode/{namespace}/{id}`: what an id says about itself.

use serde::{Deserialize, Serialize};

/// The decoded parts of an id, by the namespace's kind (`"kind"` on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decoded {
    /// An integer of a sequence namespace.
    Sequence {
        /// The namespace asked about.
        namespace: String,
        /// The id.
        #[serde(with = "crate::decimal")]
        #[cfg_attr(
            feature = "openapi",
            schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
        )]
        id: u64,
        /// Whether the id is of the namespace's residue class (any member's, with several
        /// authorities), within its width and at or above its start.
        in_namespace: bool,
        /// Whether it lies below the highest watermark this node has seen: it may have been
        /// handed out (by any node). `false` means no node has handed it out yet.
        issued: bool,
        /// The namespace's step (absent from nodes older than this field).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
        /// The id's residue class, `id % step`: the offset of the sequence, or of the multi
        /// authority's member, that can have issued it (absent from nodes older than this
        /// field).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        residue: Option<u64>,
        /// With a multi authority: the member owning that residue class, from 1 in
        /// configuration order (as `idmint admin reseed --member`). Absent with a single
        /// authority, or when no member owns the class (`in_namespace` is then `false`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        member: Option<u32>,
    },
    /// A snowflake id split into its fields.
    Snowflake {
        /// The namespace asked about.
        namespace: String,
        /// The id.
        #[serde(with = "crate::decimal")]
        #[cfg_attr(
            feature = "openapi",
            schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
        )]
        id: u64,
        /// When it was made, RFC 3339 UTC with milliseconds (always writable: a snowflake time
        /// is below 2^64 ns, before 2555).
        #[cfg_attr(feature = "openapi", schema(format = DateTime))]
        timestamp: String,
        /// The same instant in Unix milliseconds.
        unix_ms: u64,
        /// The node field of every layout but Instagram's: worker, machine or process id.
        /// Absent for an Instagram-layout id, which has `shard` instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<u64>,
        /// The node field of an Instagram-layout id: its logical shard (a node fills it with its
        /// leased worker id). Absent for every other layout, which has `worker` instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shard: Option<u64>,
        /// The sequence field within the time unit.
        sequence: u64,
    },
    /// A UUIDv7.
    Uuid7 {
        /// The namespace asked about.
        namespace: String,
        /// The canonical UUID text.
        #[cfg_attr(
            feature = "openapi",
            schema(
                pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
            )
        )]
        id: String,
        /// When it was made, RFC 3339 UTC with milliseconds; `null` when that lies after
        /// `9999-12-31T23:59:59.999Z`, which RFC 3339 cannot write (48 bits of milliseconds
        /// reach the year 10889). `unix_ms` is always there.
        #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
        timestamp: Option<String>,
        /// The same instant in Unix milliseconds.
        unix_ms: u64,
    },
    /// A ULID.
    Ulid {
        /// The namespace asked about.
        namespace: String,
        /// The canonical 26-character text.
        #[cfg_attr(feature = "openapi", schema(pattern = "^[0-7][0-9A-HJKMNP-TV-Z]{25}$"))]
        id: String,
        /// When it was made, RFC 3339 UTC with milliseconds; `null` when that lies after
        /// `9999-12-31T23:59:59.999Z`, which RFC 3339 cannot write (48 bits of milliseconds
        /// reach the year 10889). `unix_ms` is always there.
        #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
        timestamp: Option<String>,
        /// The same instant in Unix milliseconds.
        unix_ms: u64,
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kind_tags_the_answer() {
        let d = Decoded::Sequence {
            namespace: "photos".into(),
            id: 7,
            in_namespace: true,
            issued: false,
            step: Some(4),
            residue: Some(3),
            member: Some(2),
        };
        let v: serde_json::Value = serde_json::to_value(&d).unwrap();
        assert_eq!(v["kind"], "sequence");
        assert_eq!(v["id"], "7");
        assert_eq!(v["residue"], 3);
        assert_eq!(v["member"], 2);
        assert_eq!(serde_json::from_value::<Decoded>(v).unwrap(), d);
    }

    #[test]
    fn a_snowflake_node_field_is_worker_or_shard_never_both() {
        for (worker, shard, key) in [(Some(7), None, "worker"), (None, Some(5), "shard")] {
            let d = Decoded::Snowflake {
                namespace: "n".into(),
                id: 1,
                timestamp: "2024-01-01T00:00:00.000Z".into(),
                unix_ms: 1,
                worker,
                shard,
                sequence: 0,
            };
            let v = serde_json::to_value(&d).unwrap();
            let other = if key == "worker" { "shard" } else { "worker" };
            assert!(v.get(key).is_some() && v.get(other).is_none(), "{v}");
            assert_eq!(serde_json::from_value::<Decoded>(v).unwrap(), d);
        }
    }

    #[test]
    fn an_answer_without_residue_fields_still_reads() {
        let old = serde_json::json!({"kind": "sequence", "namespace": "photos", "id": "7",
            "in_namespace": true, "issued": false});
        let Decoded::Sequence {
            step,
            residue,
            member,
            ..
        } = serde_json::from_value::<Decoded>(old).unwrap()
        else {
            panic!("not a sequence answer");
        };
        assert_eq!((step, residue, member), (None, None, None));
        let single = Decoded::Sequence {
            namespace: "photos".into(),
            id: 7,
            in_namespace: true,
            issued: false,
            step: Some(1),
            residue: Some(0),
            member: None,
        };
        let v = serde_json::to_value(&single).unwrap();
        assert!(v.get("member").is_none(), "{v}");
    }

    #[test]
    fn a_time_past_9999_is_null_beside_its_unix_ms() {
        let d = Decoded::Ulid {
            namespace: "u".into(),
            id: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ".into(),
            timestamp: None,
            unix_ms: (1 << 48) - 1,
        };
        let v: serde_json::Value = serde_json::to_value(&d).unwrap();
        assert_eq!(v["timestamp"], serde_json::Value::Null);
        assert_eq!(v["unix_ms"], 281_474_976_710_655u64);
        assert_eq!(serde_json::from_value::<Decoded>(v).unwrap(), d);
    }
}
