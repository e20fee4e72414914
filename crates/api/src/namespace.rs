//! `GET /v1/namespaces` and `GET /v1/namespaces/{namespace}`: settings and live state.

use serde::{Deserialize, Serialize};

/// `{"namespaces": [...]}`, sorted by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamespaceList {
    /// Every namespace the node serves.
    pub namespaces: Vec<NamespaceInfo>,
}

/// One namespace: its name, kind (`"kind"` on the wire), settings and state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum NamespaceInfo {
    /// Integers from leased blocks.
    Sequence {
        /// The name.
        namespace: String,
        /// Whether the node created it on first use (auto-create) rather than from its
        /// configuration; false for a namespace the node does not serve, and from servers
        /// older than this field.
        #[serde(default)]
        auto_created: bool,
        /// The family it is a member of (`invoices.*`, from `[namespaces."invoices.*"]`):
        /// created on first use with the family's settings. Absent for other namespaces, and
        /// from servers older than this field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        family: Option<String>,
        /// What the namespace may hand out and how it caches.
        settings: SequenceSettings,
        /// Live state on this node.
        state: SequenceState,
    },
    /// Time-ordered 64-bit ids.
    Snowflake {
        /// The name.
        namespace: String,
        /// Layout and worker.
        settings: SnowflakeSettings,
        /// Live state on this node.
        state: SnowflakeState,
    },
    /// UUIDv7 (no settings, no state).
    Uuid7 {
        /// The name.
        namespace: String,
    },
    /// ULID (no settings, no state).
    Ulid {
        /// The name.
        namespace: String,
    },
}

impl NamespaceInfo {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        match self {
            NamespaceInfo::Sequence { namespace, .. }
            | NamespaceInfo::Snowflake { namespace, .. }
            | NamespaceInfo::Uuid7 { namespace }
            | NamespaceInfo::Ulid { namespace } => namespace,
        }
    }

    /// `sequence`, `snowflake`, `uuid7` or `ulid`.
    pub fn kind(&self) -> &'static str {
        match self {
            NamespaceInfo::Sequence { .. } => "sequence",
            NamespaceInfo::Snowflake { .. } => "snowflake",
            NamespaceInfo::Uuid7 { .. } => "uuid7",
            NamespaceInfo::Ulid { .. } => "ulid",
        }
    }
}

/// Which integers a sequence namespace hands out, and how it caches them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SequenceSettings {
    /// 32 or 64: ids stay below 2^31 or 2^63.
    pub width: u32,
    /// The first id.
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub start: u64,
    /// Distance between consecutive ids.
    pub step: u64,
    /// Residue class: every id ≡ offset (mod step).
    pub offset: u64,
    /// The residue classes (ids modulo `step`) the node's authority may grant: the offset for
    /// a single authority, every member's for a multi authority. A lower tier checks every
    /// block against them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub residues: Vec<u64>,
    /// The cache mode and its sizing.
    pub cache: CacheSettings,
}

/// How a sequence namespace caches blocks (`"mode"` on the wire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "mode", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CacheSettings {
    /// No buffer: every request reserves from the authority.
    Off,
    /// Blocks of one size.
    Fixed {
        /// Ids per block.
        block_size: u64,
        /// Refill below this fraction of a block.
        low_water: f64,
    },
    /// Blocks sized to hold `buffer_seconds` of the demand average.
    Adaptive {
        /// Seconds of demand a block should hold.
        buffer_seconds: f64,
        /// Smallest block.
        min_block: u64,
        /// Largest block.
        max_block: u64,
        /// Refill below this fraction of the target block.
        low_water: f64,
    },
}

/// Live state of a sequence namespace on this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SequenceState {
    /// The highest watermark the authority reported to this node: every id below it has been
    /// reserved by some node.
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub watermark: u64,
    /// Whether the namespace was retired (`idmint admin retire`): it hands out no id any more,
    /// and requests answer `namespace_retired`. Its watermark is past its largest id, so
    /// `ids_used` is its capacity. Absent (false) from older nodes.
    #[serde(default)]
    pub retired: bool,
    /// Ids in this node's buffer, ready to hand out.
    pub ids_buffered: u64,
    /// Demand average, ids per second (0 with cache `off`).
    pub demand_per_second: f64,
    /// The size of the next refill (0 with cache `off`).
    pub block_size: u64,
    /// Ids handed out by this node (ids and blocks).
    pub ids_served: u64,
    /// Ids reserved but never handed out nor returned (lost to restarts and refusals).
    pub ids_burned: u64,
    /// Ids this node reserved from the authority (in blocks, or per request with cache `off`).
    /// At rest: reserved = served + buffered + burned + given back.
    #[serde(default)]
    pub ids_reserved: u64,
    /// Ids this node handed back to the authority (unused tails at a clean shutdown).
    #[serde(default)]
    pub ids_given_back: u64,
    /// Refills completed.
    pub refills: u64,
    /// Ids of the namespace below the watermark.
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub ids_used: u64,
    /// Ids the namespace can ever hand out.
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub capacity: u64,
    /// `ids_used / capacity`.
    pub used_fraction: f64,
    /// When the namespace runs out at the rate it was served over the last hour (RFC 3339), if
    /// within a thousand years and it served anything. Not `demand_per_second`: one burst
    /// counts as its share of an hour (a node younger than an hour divides by an hour too).
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub projected_exhaustion: Option<String>,
    /// How many seconds of serving the projection's rate was measured over (at most an hour
    /// and a minute; 0 before the first two readings).
    #[serde(default)]
    pub projection_window_seconds: u64,
    /// The latest refill's error, if the latest refill failed.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_error: Option<String>,
    /// With a `multi` authority, the state of each member (each owns a residue class of this
    /// namespace); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<crate::MemberState>,
    /// For a namespace in strict order (`order = "strict"`), who leads it as this node sees
    /// it; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderState>,
}

/// Who leads a strict namespace, as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaderState {
    /// `leader` (this node serves it), `follower` (it forwards to another node) or `seeking`
    /// (no leader known: requests wait, then answer `no_leader`).
    pub role: String,
    /// The leader's gRPC url: this node's `peers.advertise` while it leads, the leader's
    /// while it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The leader lease's holder, while following.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// This node's term (the leader lease's fencing token), while leading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// Why no leader is known, while seeking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Layout and worker of a snowflake namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnowflakeSettings {
    /// The node field this node issues under.
    pub worker: u64,
    /// The bit layout.
    pub layout: LayoutSettings,
}

/// A snowflake bit layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LayoutSettings {
    /// Bits of time.
    pub timestamp_bits: u8,
    /// Bits of worker/machine/shard.
    pub node_bits: u8,
    /// Bits of sequence within a time unit.
    pub sequence_bits: u8,
    /// The time unit, e.g. `"1ms"`, `"10ms"`.
    pub time_unit: String,
    /// The time unit in nanoseconds (0 from older servers).
    #[serde(default)]
    pub time_unit_ns: u64,
    /// The most bits an id may use: 63, or fewer (53 for `js53`); 0 from older servers.
    #[serde(default)]
    pub max_bits: u8,
    /// The epoch, RFC 3339.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub epoch: String,
    /// The epoch in Unix milliseconds.
    pub epoch_unix_ms: u64,
    /// Which of node and sequence comes first below the timestamp.
    pub order: FieldOrder,
    /// What the node field is called in this layout's ids (decode answers): `shard` for the
    /// `instagram` layout (the worker id this node issues under is the shard), `worker` for
    /// every other; `worker` from older servers.
    #[serde(default)]
    pub node_field: NodeField,
}

/// The name of a snowflake layout's node field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NodeField {
    /// A worker (machine, process) id.
    #[default]
    Worker,
    /// Instagram's logical shard.
    Shard,
}

impl NodeField {
    /// `"worker"` or `"shard"`, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeField::Worker => "worker",
            NodeField::Shard => "shard",
        }
    }
}

/// Field order below the timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FieldOrder {
    /// Twitter's order: timestamp, node, sequence.
    NodeThenSequence,
    /// Sonyflake's order: timestamp, sequence, node.
    SequenceThenNode,
}

/// Live state of a snowflake namespace on this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnowflakeState {
    /// Ids handed out by this node.
    pub ids_served: u64,
    /// The last timestamp issued, in time units since the epoch (`null` before the first id).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_timestamp: Option<u64>,
    /// When the layout's timestamp field runs out (RFC 3339): the first instant whose
    /// timestamp does not fit its bits. No id is issued at or after it (409 `time_exhausted`).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub time_runs_out: String,
    /// Whole seconds from now (the node's clock) until `time_runs_out`, rounded down; 0 once it
    /// has passed. Absent from servers older than this field (read as 0).
    #[serde(default)]
    pub seconds_to_exhaustion: u64,
    /// How many of the group's worker ids are leased (`null`: a fixed worker id on an authority
    /// that stores no leases). Absent from older servers.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub worker_pool: Option<WorkerPool>,
    /// The sequence field's capacity per time unit against the peak observed. Absent from older
    /// servers.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub sequence_headroom: Option<SequenceHeadroom>,
    /// The worker lease this node holds for the namespace's group (`null`: a fixed worker id on
    /// an authority that stores no leases, or a namespace whose shards are owned).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub worker_lease: Option<WorkerLeaseState>,
    /// With `shards = "owned"`: the shards, and which node holds each range (`null`
    /// otherwise). Absent from older servers.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub shards: Option<ShardMap>,
}

/// The shards of a namespace with `shards = "owned"` and where each range of them is served: a
/// client sends a shard's requests to its range's holder, which serves them without a forward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShardMap {
    /// Shards `0` to `logical_shards - 1`; a key goes to `key % logical_shards`.
    pub logical_shards: u64,
    /// Shards per range: range `r` holds shards `r * shard_range` to `(r + 1) * shard_range - 1`.
    pub shard_range: u64,
    /// This node's url as the holders below name it (`peers.advertise`).
    pub this_node: String,
    /// Every range with a live lease by the authority's clock, by range; a range absent is
    /// held by nobody (the next node asked takes it). Empty when the authority could not be
    /// read (see `error`).
    pub ranges: Vec<ShardRangeHolder>,
    /// Why the authority's leases could not be read, if they could not.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub error: Option<String>,
}

/// One range of shards and the node holding its lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShardRangeHolder {
    /// The range.
    pub range: u64,
    /// Its first shard.
    pub first_shard: u64,
    /// Its last shard.
    pub last_shard: u64,
    /// The holder's url (its `peers.advertise`).
    pub holder: String,
}

/// The worker ids of a lease group: how many are leased out of how many the layout's node
/// bits allow. When every one is leased, the next node of the group cannot start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerPool {
    /// The lease group (the namespace, or its `worker_group`).
    pub group: String,
    /// Worker ids the layout's node bits allow: `2^node_bits`.
    pub possible: u64,
    /// Worker ids with a live lease, by the authority's clock, this node's included; `null`
    /// when the authority could not be read (see `error`).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub held: Option<u64>,
    /// `held / possible`; `null` with `held`.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub used_fraction: Option<f64>,
    /// Why the authority's leases could not be read, if they could not.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub error: Option<String>,
}

/// The sequence field of a snowflake worker: how many ids one worker may issue per time unit,
/// against the most it issued in one unit lately.
///
/// The peak is exact for the units it sees: every time a request of this namespace takes ids
/// from a time unit, the worker's sequence number in that unit (plus one) is the number of
/// ids the worker issued in it so far, and the peak is the largest such count (the full
/// limit if a request had to wait for the next unit). It covers the current and the previous
/// window of `window_seconds` (windows aligned to the layout's epoch, on the node's clock), so
/// it forgets a burst after one to two windows. Namespaces sharing a worker group share one
/// worker, so each sees the ids the others take in the units it touches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SequenceHeadroom {
    /// Ids one worker can issue per time unit: `2^sequence_bits`.
    pub limit_per_unit: u64,
    /// The same per second: `limit_per_unit` times the time units in a second.
    pub limit_per_second: f64,
    /// The most ids the worker issued in one time unit during the current and previous window
    /// (0: none).
    pub peak_per_unit: u64,
    /// `peak_per_unit / limit_per_unit`: 1 means a unit ran full and requests waited for the
    /// next one.
    pub peak_fraction: f64,
    /// `limit_per_unit - peak_per_unit`: ids per unit left before requests must wait.
    pub headroom_per_unit: u64,
    /// Requests of this namespace that found their time unit's sequence used up and waited for
    /// the next unit, since the node started.
    pub units_exhausted: u64,
    /// The window length, seconds.
    pub window_seconds: u64,
}

impl WorkerPool {
    /// A pool of `possible` worker ids of which `held` are leased, or unknown (`held: None`)
    /// for the reason `error`; `used_fraction` is derived.
    pub fn new(group: String, possible: u64, held: Option<u64>, error: Option<String>) -> Self {
        WorkerPool {
            group,
            possible,
            held,
            used_fraction: held.map(|h| h as f64 / possible.max(1) as f64),
            error,
        }
    }
}

impl SequenceHeadroom {
    /// The headroom of a worker that may issue `limit_per_unit` ids per time unit of
    /// `unit_nanos` and issued at most `peak_per_unit` in one lately; the fraction, the
    /// headroom and the per-second limit are derived.
    pub fn new(
        limit_per_unit: u64,
        unit_nanos: u64,
        peak_per_unit: u64,
        units_exhausted: u64,
        window_seconds: u64,
    ) -> Self {
        SequenceHeadroom {
            limit_per_unit,
            limit_per_second: limit_per_unit as f64 * 1e9 / unit_nanos.max(1) as f64,
            peak_per_unit,
            peak_fraction: peak_per_unit as f64 / limit_per_unit.max(1) as f64,
            headroom_per_unit: limit_per_unit.saturating_sub(peak_per_unit),
            units_exhausted,
            window_seconds,
        }
    }
}

/// A worker lease as the node holding it sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerLeaseState {
    /// The lease group (the namespace, or its `worker_group`).
    pub group: String,
    /// Whether the node may issue under it.
    pub status: LeaseStatus,
    /// The fencing token of the lease.
    pub token: u64,
    /// The time floor durably recorded in the lease (RFC 3339): no id is issued at or after it
    /// until it is raised.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub floor: String,
    /// Who holds it (this node): host name and process id.
    pub holder: String,
    /// The last renewal error, if the last renewal failed.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_error: Option<String>,
}

/// Whether a node may issue under its worker lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LeaseStatus {
    /// Held and renewed: issuing.
    Held,
    /// The last renewal failed; issuing until the recorded floor or the lease's expiry minus
    /// the safety margin, whichever comes first.
    Renewing,
    /// Lost (taken over or expired): not issuing until a new lease is acquired.
    Lost,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sequence_info_round_trips() {
        let info = NamespaceInfo::Sequence {
            namespace: "photos".into(),
            auto_created: true,
            family: None,
            settings: SequenceSettings {
                width: 64,
                start: 1,
                step: 1,
                offset: 0,
                residues: Vec::new(),
                cache: CacheSettings::Adaptive {
                    buffer_seconds: 10.0,
                    min_block: 100,
                    max_block: 1_000_000,
                    low_water: 0.5,
                },
            },
            state: SequenceState {
                watermark: 1001,
                retired: false,
                ids_buffered: 998,
                demand_per_second: 0.0,
                block_size: 1000,
                ids_served: 2,
                ids_burned: 0,
                ids_reserved: 1000,
                ids_given_back: 0,
                refills: 1,
                ids_used: 1000,
                capacity: (1 << 63) - 1,
                used_fraction: 0.0,
                projected_exhaustion: None,
                projection_window_seconds: 0,
                last_error: None,
                members: Vec::new(),
                leader: None,
            },
        };
        let v = serde_json::to_value(&info).unwrap();
        assert_eq!(v["kind"], "sequence");
        assert_eq!(v["settings"]["cache"]["mode"], "adaptive");
        assert_eq!(v["state"]["watermark"], "1001");
        assert_eq!(v["state"]["ids_buffered"], 998);
        assert_eq!(v["auto_created"], true);
        assert!(v.get("family").is_none());
        assert_eq!(
            serde_json::from_value::<NamespaceInfo>(v.clone()).unwrap(),
            info
        );
        let member = NamespaceInfo::Sequence {
            namespace: "invoices.42".into(),
            auto_created: false,
            family: Some("invoices.*".into()),
            settings: match &info {
                NamespaceInfo::Sequence { settings, .. } => settings.clone(),
                _ => unreachable!(),
            },
            state: match &info {
                NamespaceInfo::Sequence { state, .. } => state.clone(),
                _ => unreachable!(),
            },
        };
        let m = serde_json::to_value(&member).unwrap();
        assert_eq!(m["family"], "invoices.*");
        assert_eq!(serde_json::from_value::<NamespaceInfo>(m).unwrap(), member);
        assert_eq!(v["state"]["retired"], false);
        // An older server does not send the flags: not auto-created, not retired.
        let mut old = v;
        old.as_object_mut().unwrap().remove("auto_created");
        old["state"].as_object_mut().unwrap().remove("retired");
        assert!(matches!(
            serde_json::from_value::<NamespaceInfo>(old).unwrap(),
            NamespaceInfo::Sequence {
                auto_created: false,
                ..
            }
        ));
    }

    #[test]
    fn snowflake_foresight_round_trips_and_older_servers_read_as_unknown() {
        let info = NamespaceInfo::Snowflake {
            namespace: "events".into(),
            settings: SnowflakeSettings {
                worker: 1,
                layout: LayoutSettings {
                    timestamp_bits: 41,
                    node_bits: 10,
                    sequence_bits: 12,
                    time_unit: "1ms".into(),
                    time_unit_ns: 1_000_000,
                    max_bits: 63,
                    epoch: "2010-11-04T01:42:54.657Z".into(),
                    epoch_unix_ms: 1_288_834_974_657,
                    order: FieldOrder::NodeThenSequence,
                    node_field: NodeField::Worker,
                },
            },
            state: SnowflakeState {
                ids_served: 5000,
                last_timestamp: Some(7),
                time_runs_out: "2080-07-10T17:30:30.208Z".into(),
                seconds_to_exhaustion: 1_700_000_000,
                worker_pool: Some(WorkerPool::new("events".into(), 1024, Some(2), None)),
                shards: None,
                sequence_headroom: Some(SequenceHeadroom::new(4096, 1_000_000, 4096, 1, 60)),
                worker_lease: None,
            },
        };
        let v = serde_json::to_value(&info).unwrap();
        assert_eq!(v["state"]["seconds_to_exhaustion"], 1_700_000_000u64);
        assert_eq!(v["state"]["worker_pool"]["held"], 2);
        assert_eq!(v["state"]["worker_pool"]["possible"], 1024);
        assert_eq!(v["state"]["worker_pool"]["used_fraction"], 2.0 / 1024.0);
        assert_eq!(v["state"]["sequence_headroom"]["peak_fraction"], 1.0);
        assert_eq!(v["state"]["sequence_headroom"]["headroom_per_unit"], 0);
        assert_eq!(
            v["state"]["sequence_headroom"]["limit_per_second"],
            4_096_000.0
        );
        assert_eq!(
            serde_json::from_value::<NamespaceInfo>(v.clone()).unwrap(),
            info
        );
        let mut old = v;
        let state = old["state"].as_object_mut().unwrap();
        for field in ["seconds_to_exhaustion", "worker_pool", "sequence_headroom"] {
            state.remove(field);
        }
        match serde_json::from_value::<NamespaceInfo>(old).unwrap() {
            NamespaceInfo::Snowflake { state, .. } => {
                assert_eq!(state.seconds_to_exhaustion, 0);
                assert_eq!(state.worker_pool, None);
                assert_eq!(state.sequence_headroom, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kinds_without_settings_are_just_named() {
        let v = serde_json::to_value(NamespaceInfo::Ulid {
            namespace: "u".into(),
        })
        .unwrap();
        assert_eq!(v, serde_json::json!({"kind": "ulid", "namespace": "u"}));
    }
}
