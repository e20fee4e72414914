//! Bit layouts of 64-bit time-ordered ids.
//!
//! A [`Layout`] splits an id into a timestamp (in whole time units since an epoch), a node field
//! (worker id, machine id or logical shard) and a sequence field. The fields are ordered
//! timestamp-first so ids sort by time; within a time unit, either node-then-sequence (Twitter,
//! Instagram, Discord) or sequence-then-node (Sonyflake).
//!
//! Invariants: a `Layout` value always fits its declared bit limit (63 bits, so ids are positive
//! signed 64-bit integers, or 53 bits for JavaScript-safe ids), has at least one timestamp bit and
//! a non-zero time unit. [`Layout::compose`] rejects fields that do not fit, so
//! `decode(compose(parts)) == parts` for every accepted `parts`.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Order of the node and sequence fields below the timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOrder {
    /// `timestamp | node | sequence` (Twitter, Instagram, Discord).
    NodeThenSequence,
    /// `timestamp | sequence | node` (Sonyflake).
    SequenceThenNode,
}

/// The parameters of a layout, validated by [`Layout::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayoutSpec {
    /// Bits of the timestamp field.
    pub timestamp_bits: u8,
    /// Bits of the node (worker, machine or shard) field.
    pub node_bits: u8,
    /// Bits of the per-time-unit sequence field.
    pub sequence_bits: u8,
    /// Length of one time unit.
    pub time_unit: Duration,
    /// The epoch, in milliseconds since the Unix epoch.
    pub epoch_unix_ms: u64,
    /// Order of node and sequence.
    pub order: FieldOrder,
    /// The most bits an id may use: 63 (positive `i64`) or fewer, e.g. 53 for JavaScript.
    pub max_bits: u8,
}

/// Why a layout cannot be constructed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// No timestamp bits: ids would not be time-ordered and would repeat.
    #[error("the timestamp needs at least 1 bit")]
    NoTimestampBits,
    /// The fields add up to more bits than allowed.
    #[error("timestamp {timestamp} + node {node} + sequence {sequence} = {total} bits, more than the {limit} allowed")]
    TooManyBits {
        /// Timestamp bits.
        timestamp: u8,
        /// Node bits.
        node: u8,
        /// Sequence bits.
        sequence: u8,
        /// Their sum.
        total: u32,
        /// The limit.
        limit: u8,
    },
    /// The bit limit is above 63.
    #[error("max_bits is {0}; ids are positive 64-bit signed integers, so at most 63")]
    LimitAbove63(u8),
    /// The time unit is shorter than a microsecond or not a whole number of nanoseconds above 0.
    #[error("time unit {0:?} is too short; the shortest is 1 microsecond")]
    TimeUnitTooShort(Duration),
    /// The time unit is longer than a day.
    #[error("time unit {0:?} is too long; the longest is 1 day")]
    TimeUnitTooLong(Duration),
    /// The epoch's nanoseconds do not fit in 64 bits (after year 2554).
    #[error("epoch {0} ms is too far in the future")]
    EpochTooLate(u64),
    /// No preset has this name.
    #[error("unknown layout preset {0:?}; known: twitter, instagram, sonyflake, discord, js53")]
    UnknownPreset(String),
}

/// Why parts cannot be composed into an id of a layout.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ComposeError {
    /// The timestamp does not fit the timestamp field.
    #[error("timestamp {value} does not fit in {bits} bits")]
    Timestamp {
        /// The value.
        value: u64,
        /// The field's bits.
        bits: u8,
    },
    /// The node does not fit the node field.
    #[error("node {value} does not fit in {bits} bits (maximum {max})")]
    Node {
        /// The value.
        value: u64,
        /// The field's bits.
        bits: u8,
        /// Its maximum.
        max: u64,
    },
    /// The sequence does not fit the sequence field.
    #[error("sequence {value} does not fit in {bits} bits (maximum {max})")]
    Sequence {
        /// The value.
        value: u64,
        /// The field's bits.
        bits: u8,
        /// Its maximum.
        max: u64,
    },
    /// A time before the layout's epoch.
    #[error("time {unix_ms} ms is before the layout's epoch {epoch_ms} ms")]
    BeforeEpoch {
        /// The time.
        unix_ms: u64,
        /// The epoch.
        epoch_ms: u64,
    },
}

/// Why an id is not an id of a layout.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The id uses bits above the layout's limit.
    #[error("id {id} uses more than the layout's {bits} bits")]
    TooWide {
        /// The id.
        id: u64,
        /// The layout's bit count.
        bits: u32,
    },
}

/// A validated bit layout. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    spec: LayoutSpec,
    unit_nanos: u64,
    epoch_nanos: u64,
    timestamp_shift: u32,
    node_shift: u32,
    sequence_shift: u32,
}

/// What the node field of a layout's ids is called where people read them (decode answers,
/// status): [`Layout::node_field`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeField {
    /// `worker`: a worker (machine, process) id, every layout but Instagram's.
    Worker,
    /// `shard`: Instagram's logical shard. A node issuing such ids fills it with its leased
    /// worker id like any node field; only the name differs.
    Shard,
}

impl NodeField {
    /// `"worker"` or `"shard"`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeField::Worker => "worker",
            NodeField::Shard => "shard",
        }
    }
}

/// The fields of an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Parts {
    /// Time units since the layout's epoch.
    pub timestamp: u64,
    /// Node, worker, machine or shard id.
    pub node: u64,
    /// Sequence within the time unit.
    pub sequence: u64,
}

/// A decoded id: its parts and the wall time its timestamp stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The parts.
    pub parts: Parts,
    /// Start of the id's time unit, in nanoseconds since the Unix epoch.
    pub unix_nanos: u64,
}

impl Decoded {
    /// Milliseconds since the Unix epoch.
    pub fn unix_millis(&self) -> u64 {
        self.unix_nanos / 1_000_000
    }
    /// The time as a `SystemTime`.
    pub fn time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.unix_nanos)
    }
    /// The time as RFC 3339 in UTC, e.g. `2026-11-22T02:39:20.123Z`. Total: `unix_nanos` is a
    /// `u64`, so the time lies before 2555 and always has a four-digit year.
    pub fn rfc3339(&self) -> String {
        rfc3339_millis(self.unix_millis())
            .unwrap_or_else(|| format!("{} ms after 1970 (past year 9999)", self.unix_millis()))
    }
}

/// The last Unix millisecond RFC 3339 can write: `9999-12-31T23:59:59.999Z` (its years have four
/// digits). 48-bit millisecond timestamps (UUIDv7, ULID) reach the year 10889.
pub const RFC3339_MAX_UNIX_MS: u64 = 253_402_300_799_999;

/// `unix_ms` as RFC 3339 in UTC with milliseconds, e.g. `2026-11-22T02:39:20.123Z`; `None` after
/// [`RFC3339_MAX_UNIX_MS`]. Total: never panics, whatever the input (humantime's formatter
/// fails past 9999, and `to_string` would turn that failure into a panic).
pub fn rfc3339_millis(unix_ms: u64) -> Option<String> {
    if unix_ms > RFC3339_MAX_UNIX_MS {
        return None;
    }
    let t = UNIX_EPOCH.checked_add(Duration::from_millis(unix_ms))?;
    let mut out = String::with_capacity(24);
    fmt::Write::write_fmt(
        &mut out,
        format_args!("{}", humantime::format_rfc3339_millis(t)),
    )
    .ok()?;
    Some(out)
}

fn mask(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl Layout {
    /// Validates `spec` into a layout.
    pub fn new(spec: LayoutSpec) -> Result<Layout, LayoutError> {
        if spec.max_bits > 63 {
            return Err(LayoutError::LimitAbove63(spec.max_bits));
        }
        if spec.timestamp_bits == 0 {
            return Err(LayoutError::NoTimestampBits);
        }
        let total = u32::from(spec.timestamp_bits)
            + u32::from(spec.node_bits)
            + u32::from(spec.sequence_bits);
        if total > u32::from(spec.max_bits) {
            return Err(LayoutError::TooManyBits {
                timestamp: spec.timestamp_bits,
                node: spec.node_bits,
                sequence: spec.sequence_bits,
                total,
                limit: spec.max_bits,
            });
        }
        if spec.time_unit < Duration::from_micros(1) {
            return Err(LayoutError::TimeUnitTooShort(spec.time_unit));
        }
        if spec.time_unit > Duration::from_secs(86_400) {
            return Err(LayoutError::TimeUnitTooLong(spec.time_unit));
        }
        // time_unit <= 1 day, so its nanoseconds fit in u64.
        let unit_nanos = spec.time_unit.as_nanos() as u64;
        let epoch_nanos = spec
            .epoch_unix_ms
            .checked_mul(1_000_000)
            .ok_or(LayoutError::EpochTooLate(spec.epoch_unix_ms))?;
        let (node_shift, sequence_shift) = match spec.order {
            FieldOrder::NodeThenSequence => (u32::from(spec.sequence_bits), 0),
            FieldOrder::SequenceThenNode => (0, u32::from(spec.node_bits)),
        };
        Ok(Layout {
            spec,
            unit_nanos,
            epoch_nanos,
            timestamp_shift: u32::from(spec.node_bits) + u32::from(spec.sequence_bits),
            node_shift,
            sequence_shift,
        })
    }

    /// Twitter Snowflake: 41 bits of milliseconds since 2010-11-04T01:42:54.657Z, 10 bits of
    /// worker, 12 bits of sequence (4096 ids per millisecond per worker).
    pub fn twitter() -> Layout {
        Self::preset_unchecked(
            41,
            10,
            12,
            Duration::from_millis(1),
            1_288_834_974_657,
            FieldOrder::NodeThenSequence,
            63,
        )
    }

    /// Instagram: milliseconds since 2011-08-24T21:07:01.721Z, 13 bits of logical shard,
    /// 10 bits of `nextval() % 1024`. Instagram declared 41 timestamp bits in a 64-bit signed
    /// `bigint`, whose top bit turns ids negative once it is set (June 2046). idmint keeps ids
    /// positive and uses 40: the same bit positions, so identical ids until then, and a clear
    /// "timestamp field ran out" error after.
    pub fn instagram() -> Layout {
        Self::preset_unchecked(
            40,
            13,
            10,
            Duration::from_millis(1),
            1_314_220_021_721,
            FieldOrder::NodeThenSequence,
            63,
        )
    }

    /// Sonyflake: 39 bits of 10 ms units since 2014-09-01T00:00:00Z, 8 bits of sequence, then
    /// 16 bits of machine id (sequence before machine, as Sonyflake orders them).
    pub fn sonyflake() -> Layout {
        Self::preset_unchecked(
            39,
            16,
            8,
            Duration::from_millis(10),
            1_409_529_600_000,
            FieldOrder::SequenceThenNode,
            63,
        )
    }

    /// Discord: milliseconds since 2015-01-01T00:00:00Z, 10 bits of worker and process
    /// (5 + 5), 12 bits of increment. Discord reserves 42 timestamp bits; idmint keeps ids
    /// positive in a signed 64-bit integer and uses 41, which gives identical ids until the
    /// 42nd bit would first be set, in 2084.
    pub fn discord() -> Layout {
        Self::preset_unchecked(
            41,
            10,
            12,
            Duration::from_millis(1),
            1_420_070_400_000,
            FieldOrder::NodeThenSequence,
            63,
        )
    }

    /// JavaScript-safe: every id is below 2^53 (`Number.MAX_SAFE_INTEGER`), so it survives JSON
    /// parsers that read numbers as doubles. 41 bits of milliseconds since 2025-01-01T00:00:00Z
    /// (enough until 2094), 5 bits of worker (32 workers), 7 bits of sequence (128 ids per
    /// millisecond, 128,000 per second per worker).
    pub fn js53() -> Layout {
        Self::preset_unchecked(
            41,
            5,
            7,
            Duration::from_millis(1),
            1_735_689_600_000,
            FieldOrder::NodeThenSequence,
            53,
        )
    }

    /// A preset by name: `twitter`, `instagram`, `sonyflake`, `discord` or `js53`.
    pub fn preset(name: &str) -> Result<Layout, LayoutError> {
        match name {
            "twitter" | "snowflake" => Ok(Self::twitter()),
            "instagram" => Ok(Self::instagram()),
            "sonyflake" => Ok(Self::sonyflake()),
            "discord" => Ok(Self::discord()),
            "js53" => Ok(Self::js53()),
            other => Err(LayoutError::UnknownPreset(other.to_owned())),
        }
    }

    /// The preset names, for help texts.
    pub const PRESETS: [&'static str; 5] = ["twitter", "instagram", "sonyflake", "discord", "js53"];

    fn preset_unchecked(
        timestamp_bits: u8,
        node_bits: u8,
        sequence_bits: u8,
        time_unit: Duration,
        epoch_unix_ms: u64,
        order: FieldOrder,
        max_bits: u8,
    ) -> Layout {
        let spec = LayoutSpec {
            timestamp_bits,
            node_bits,
            sequence_bits,
            time_unit,
            epoch_unix_ms,
            order,
            max_bits,
        };
        match Layout::new(spec) {
            Ok(layout) => layout,
            // The presets are constants checked by the tests below.
            Err(e) => unreachable!("preset layout is invalid: {e}"),
        }
    }

    /// The validated parameters.
    pub fn spec(&self) -> &LayoutSpec {
        &self.spec
    }
    /// Timestamp bits.
    pub fn timestamp_bits(&self) -> u8 {
        self.spec.timestamp_bits
    }
    /// Node bits.
    pub fn node_bits(&self) -> u8 {
        self.spec.node_bits
    }
    /// Sequence bits.
    pub fn sequence_bits(&self) -> u8 {
        self.spec.sequence_bits
    }
    /// The largest timestamp (in units since the epoch).
    pub fn max_timestamp(&self) -> u64 {
        mask(self.spec.timestamp_bits)
    }
    /// What its node field is called: [`NodeField::Shard`] for [`Layout::instagram`] (the one
    /// place that rule lives), [`NodeField::Worker`] for every other layout.
    pub fn node_field(&self) -> NodeField {
        if *self == Self::instagram() {
            NodeField::Shard
        } else {
            NodeField::Worker
        }
    }
    /// The largest node id.
    pub fn max_node(&self) -> u64 {
        mask(self.spec.node_bits)
    }
    /// The largest sequence value.
    pub fn max_sequence(&self) -> u64 {
        mask(self.spec.sequence_bits)
    }
    /// Ids per time unit per node.
    pub fn ids_per_unit(&self) -> u64 {
        1u64 << self.spec.sequence_bits
    }
    /// One time unit in nanoseconds.
    pub fn unit_nanos(&self) -> u64 {
        self.unit_nanos
    }
    /// The epoch in nanoseconds since the Unix epoch.
    pub fn epoch_nanos(&self) -> u64 {
        self.epoch_nanos
    }
    /// The total number of bits ids of this layout use.
    pub fn total_bits(&self) -> u32 {
        u32::from(self.spec.timestamp_bits)
            + u32::from(self.spec.node_bits)
            + u32::from(self.spec.sequence_bits)
    }
    /// The last moment the timestamp field can express, in nanoseconds since the Unix epoch
    /// (saturating at `u64::MAX`, year 2554).
    pub fn end_of_time_nanos(&self) -> u64 {
        self.max_timestamp()
            .saturating_add(1)
            .saturating_mul(self.unit_nanos)
            .saturating_add(self.epoch_nanos)
    }

    /// The timestamp for a wall time in nanoseconds since the Unix epoch, or `None` before the
    /// epoch. May exceed [`Layout::max_timestamp`]; composing then fails.
    pub fn timestamp_at(&self, unix_nanos: u64) -> Option<u64> {
        unix_nanos
            .checked_sub(self.epoch_nanos)
            .map(|d| d / self.unit_nanos)
    }

    /// Start of timestamp `ts`'s unit, in nanoseconds since the Unix epoch (saturating).
    pub fn unix_nanos_of(&self, ts: u64) -> u64 {
        ts.saturating_mul(self.unit_nanos)
            .saturating_add(self.epoch_nanos)
    }

    /// Composes an id from its parts; fails when a part does not fit its field.
    pub fn compose(&self, parts: Parts) -> Result<u64, ComposeError> {
        if parts.timestamp > self.max_timestamp() {
            return Err(ComposeError::Timestamp {
                value: parts.timestamp,
                bits: self.spec.timestamp_bits,
            });
        }
        if parts.node > self.max_node() {
            return Err(ComposeError::Node {
                value: parts.node,
                bits: self.spec.node_bits,
                max: self.max_node(),
            });
        }
        if parts.sequence > self.max_sequence() {
            return Err(ComposeError::Sequence {
                value: parts.sequence,
                bits: self.spec.sequence_bits,
                max: self.max_sequence(),
            });
        }
        Ok(self.compose_unchecked(parts.timestamp, parts.node, parts.sequence))
    }

    /// Composes an id from a wall time in milliseconds, a node and a sequence.
    pub fn compose_at_unix_millis(
        &self,
        unix_ms: u64,
        node: u64,
        sequence: u64,
    ) -> Result<u64, ComposeError> {
        let timestamp = unix_ms
            .checked_mul(1_000_000)
            .and_then(|n| self.timestamp_at(n))
            .ok_or(ComposeError::BeforeEpoch {
                unix_ms,
                epoch_ms: self.spec.epoch_unix_ms,
            })?;
        self.compose(Parts {
            timestamp,
            node,
            sequence,
        })
    }

    /// Composes without range checks; callers guarantee each part fits.
    #[inline]
    pub(crate) fn compose_unchecked(&self, timestamp: u64, node: u64, sequence: u64) -> u64 {
        (timestamp << self.timestamp_shift)
            | (node << self.node_shift)
            | (sequence << self.sequence_shift)
    }

    /// The node field shifted into place, for generators that OR it into every id.
    #[inline]
    pub(crate) fn node_part(&self, node: u64) -> u64 {
        node << self.node_shift
    }

    /// Splits an id into its parts and the time it stands for.
    pub fn decode(&self, id: u64) -> Result<Decoded, DecodeError> {
        if self.total_bits() < 64 && id >> self.total_bits() != 0 {
            return Err(DecodeError::TooWide {
                id,
                bits: self.total_bits(),
            });
        }
        let timestamp = id >> self.timestamp_shift;
        let node = (id >> self.node_shift) & self.max_node();
        let sequence = (id >> self.sequence_shift) & self.max_sequence();
        Ok(Decoded {
            parts: Parts {
                timestamp,
                node,
                sequence,
            },
            unix_nanos: self.unix_nanos_of(timestamp),
        })
    }
}

impl FromStr for Layout {
    type Err = LayoutError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Layout::preset(s)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.spec;
        write!(
            f,
            "{} timestamp bits of {:?} since {} ms, {} node bits, {} sequence bits",
            s.timestamp_bits, s.time_unit, s.epoch_unix_ms, s.node_bits, s.sequence_bits
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn all_presets() -> Vec<Layout> {
        Layout::PRESETS
            .iter()
            .map(|p| Layout::preset(p).unwrap())
            .collect()
    }

    #[test]
    fn presets_are_as_documented() {
        let t = Layout::twitter();
        assert_eq!(
            (t.timestamp_bits(), t.node_bits(), t.sequence_bits()),
            (41, 10, 12)
        );
        assert_eq!(Layout::instagram().total_bits(), 64 - 1);
        assert_eq!(Layout::sonyflake().unit_nanos(), 10_000_000);
        // js53 fits below 2^53 for at least 50 years from its epoch.
        let js = Layout::js53();
        assert!(js.total_bits() <= 53);
        let fifty_years_ns = 50 * 365 * 86_400 * 1_000_000_000u64;
        assert!(js.end_of_time_nanos() > js.epoch_nanos() + fifty_years_ns);
        for l in all_presets() {
            assert!(l.total_bits() <= 63, "{l}");
        }
    }

    #[test]
    fn only_instagrams_node_field_is_a_shard() {
        for name in Layout::PRESETS {
            let want = if name == "instagram" {
                NodeField::Shard
            } else {
                NodeField::Worker
            };
            assert_eq!(Layout::preset(name).unwrap().node_field(), want, "{name}");
        }
        assert_eq!(NodeField::Shard.as_str(), "shard");
    }

    #[test]
    fn known_twitter_id_decodes() {
        // A public tweet id: 1212161076890996736, posted 2019-12-31T23:59:59.xxxZ.
        let d = Layout::twitter().decode(1_212_161_076_890_996_736).unwrap();
        assert!(
            d.rfc3339().starts_with("2019-12-31T23:5"),
            "{}",
            d.rfc3339()
        );
    }

    #[test]
    fn bad_layouts_are_rejected_with_reasons() {
        let base = *Layout::twitter().spec();
        let too_many = LayoutSpec {
            node_bits: 11,
            ..base
        };
        assert!(matches!(
            Layout::new(too_many),
            Err(LayoutError::TooManyBits {
                total: 64,
                limit: 63,
                ..
            })
        ));
        let js = LayoutSpec {
            max_bits: 53,
            ..base
        };
        assert!(matches!(
            Layout::new(js),
            Err(LayoutError::TooManyBits { limit: 53, .. })
        ));
        assert_eq!(
            Layout::new(LayoutSpec {
                timestamp_bits: 0,
                ..base
            }),
            Err(LayoutError::NoTimestampBits)
        );
        assert!(matches!(
            Layout::new(LayoutSpec {
                time_unit: Duration::ZERO,
                ..base
            }),
            Err(LayoutError::TimeUnitTooShort(_))
        ));
        assert_eq!(
            Layout::new(LayoutSpec {
                max_bits: 64,
                ..base
            }),
            Err(LayoutError::LimitAbove63(64))
        );
        assert!(matches!(
            Layout::preset("flake"),
            Err(LayoutError::UnknownPreset(_))
        ));
        let msg = Layout::new(too_many).unwrap_err().to_string();
        assert!(msg.contains("64 bits") && msg.contains("63"), "{msg}");
    }

    #[test]
    fn compose_rejects_parts_that_do_not_fit() {
        let l = Layout::twitter();
        assert!(matches!(
            l.compose(Parts {
                timestamp: 1 << 41,
                node: 0,
                sequence: 0
            }),
            Err(ComposeError::Timestamp { .. })
        ));
        assert!(matches!(
            l.compose(Parts {
                timestamp: 0,
                node: 1024,
                sequence: 0
            }),
            Err(ComposeError::Node { .. })
        ));
        assert!(matches!(
            l.compose(Parts {
                timestamp: 0,
                node: 0,
                sequence: 4096
            }),
            Err(ComposeError::Sequence { .. })
        ));
        assert!(matches!(
            Layout::js53().decode(1 << 53),
            Err(DecodeError::TooWide { .. })
        ));
    }

    fn arb_layout() -> impl Strategy<Value = Layout> {
        let presets = prop::sample::select(all_presets());
        let custom = (
            1u8..=63,
            0u8..=62,
            0u8..=62,
            1u64..=1_000_000,
            0u64..=2_000_000_000_000,
            any::<bool>(),
        )
            .prop_filter_map("fits", |(t, n, s, unit_us, epoch, seq_first)| {
                Layout::new(LayoutSpec {
                    timestamp_bits: t,
                    node_bits: n,
                    sequence_bits: s,
                    time_unit: Duration::from_micros(unit_us),
                    epoch_unix_ms: epoch,
                    order: if seq_first {
                        FieldOrder::SequenceThenNode
                    } else {
                        FieldOrder::NodeThenSequence
                    },
                    max_bits: 63,
                })
                .ok()
            });
        prop_oneof![presets, custom]
    }

    proptest! {
        #[test]
        fn decode_compose_round_trip(layout in arb_layout(), t in any::<u64>(), n in any::<u64>(), s in any::<u64>()) {
            let parts = Parts {
                timestamp: t & layout.max_timestamp(),
                node: n & layout.max_node(),
                sequence: s & layout.max_sequence(),
            };
            let id = layout.compose(parts).unwrap();
            prop_assert!(id < 1u64 << layout.total_bits());
            let decoded = layout.decode(id).unwrap();
            prop_assert_eq!(decoded.parts, parts);
            prop_assert_eq!(layout.compose(decoded.parts).unwrap(), id);
        }

        #[test]
        fn ids_order_by_timestamp_first(layout in arb_layout(), a in any::<u64>(), b in any::<u64>(), n in any::<u64>()) {
            let (ta, tb) = (a & layout.max_timestamp(), b & layout.max_timestamp());
            prop_assume!(ta < tb);
            let node = n & layout.max_node();
            let hi = layout.compose(Parts { timestamp: ta, node, sequence: layout.max_sequence() }).unwrap();
            let lo = layout.compose(Parts { timestamp: tb, node, sequence: 0 }).unwrap();
            prop_assert!(hi < lo);
        }
    }

    /// Guards against a panic (humantime's formatter fails on a ULID or UUIDv7 whose 48-bit
    /// millisecond timestamp lies after 9999; the HTTP decode handler would reset the
    /// connection). Formatting is total: `None` past the last four-digit year.
    #[test]
    fn rfc3339_is_total_and_stops_after_9999() {
        assert_eq!(
            rfc3339_millis(0).as_deref(),
            Some("1970-01-01T00:00:00.000Z")
        );
        assert_eq!(
            rfc3339_millis(RFC3339_MAX_UNIX_MS).as_deref(),
            Some("9999-12-31T23:59:59.999Z")
        );
        assert_eq!(rfc3339_millis(RFC3339_MAX_UNIX_MS + 1), None);
        assert_eq!(rfc3339_millis(u64::MAX), None);
        let ulid: crate::Ulid = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ".parse().unwrap();
        assert_eq!(ulid.unix_millis(), (1 << 48) - 1);
        assert_eq!(ulid.rfc3339(), None);
        let uuid: crate::Uuid7 = "ffffffff-ffff-7fff-bfff-ffffffffffff".parse().unwrap();
        assert_eq!(uuid.rfc3339(), None);
        // The largest time a layout can decode to (u64 nanoseconds, 2554) still formats.
        let d = Decoded {
            parts: Parts {
                timestamp: 0,
                node: 0,
                sequence: 0,
            },
            unix_nanos: u64::MAX,
        };
        assert!(d.rfc3339().starts_with("2554-"), "{}", d.rfc3339());
    }

    proptest! {
        /// No parse or decode entry point of the crate panics, whatever the input: every
        /// outcome is a value or an error (the HTTP decode route calls these on user input).
        #[test]
        fn parsing_and_decoding_never_panic(text in any::<String>(), v in any::<u128>(), n in any::<u64>()) {
            for s in [text.as_str(), text.trim()] {
                if let Ok(u) = s.parse::<crate::Ulid>() {
                    let _ = (u.to_string(), u.rfc3339());
                }
                if let Ok(u) = s.parse::<crate::Uuid7>() {
                    let _ = (u.to_string(), u.rfc3339());
                }
                let _ = s.parse::<Layout>();
                let _ = crate::NamespaceName::new(s);
            }
            let u = crate::Ulid::from_u128(v);
            prop_assert_eq!(u.to_string().parse::<crate::Ulid>().ok(), Some(u));
            let _ = u.rfc3339();
            if let Ok(u) = crate::Uuid7::from_u128(v) {
                prop_assert_eq!(u.to_string().parse::<crate::Uuid7>().ok(), Some(u));
                let _ = u.rfc3339();
            }
            let _ = crate::Uuid7::from_bytes(v.to_be_bytes());
            for layout in all_presets() {
                if let Ok(d) = layout.decode(n) {
                    let _ = (d.rfc3339(), d.unix_millis(), d.time());
                }
            }
            let formatted = rfc3339_millis(n);
            prop_assert_eq!(formatted.is_some(), n <= RFC3339_MAX_UNIX_MS);
        }

        #[test]
        fn any_layout_decodes_any_id_without_panic(layout in arb_layout(), n in any::<u64>()) {
            if let Ok(d) = layout.decode(n) {
                let _ = (d.rfc3339(), d.time());
            }
        }
    }
}
