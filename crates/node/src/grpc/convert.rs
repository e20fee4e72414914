//! The domain's answers as `idmint.v1` messages: ids, decoded ids and namespace info. Pure
//! formatting: every value comes from the domain ([`Ids`], [`idmint_api`] types), nothing is
//! computed about namespaces here.

use super::proto;
use crate::namespace::Ids;
use idmint_api as api;
use idmint_core::{Ulid, Uuid7};

/// `ids` of `namespace` as one message.
pub fn ids(namespace: &str, ids: Ids) -> proto::Ids {
    use proto::ids::Ids as Kind;
    let kind = match ids {
        Ids::U64(ids) => Kind::U64(proto::U64Ids { ids }),
        Ids::Uuid7(ids) => Kind::Uuid7(proto::Bytes16Ids {
            ids: ids.iter().map(|u| u.to_bytes().to_vec()).collect(),
        }),
        Ids::Ulid(ids) => Kind::Ulid(proto::Bytes16Ids {
            ids: ids.iter().map(|u| u.to_bytes().to_vec()).collect(),
        }),
    };
    proto::Ids {
        namespace: namespace.to_owned(),
        ids: Some(kind),
    }
}

/// A decoded id.
pub fn decoded(d: api::Decoded) -> proto::Decoded {
    use proto::decoded::Kind;
    let (namespace, kind) = match d {
        api::Decoded::Sequence {
            namespace,
            id,
            in_namespace,
            issued,
            step,
            residue,
            member,
        } => (
            namespace,
            Kind::Sequence(proto::DecodedSequence {
                id,
                in_namespace,
                issued,
                step: step.unwrap_or(0),
                residue: residue.unwrap_or(0),
                member,
            }),
        ),
        api::Decoded::Snowflake {
            namespace,
            id,
            timestamp,
            unix_ms,
            worker,
            shard,
            sequence,
        } => (
            namespace,
            Kind::Snowflake(proto::DecodedSnowflake {
                id,
                timestamp,
                unix_ms,
                node: match (shard, worker) {
                    (Some(shard), _) => Some(proto::decoded_snowflake::Node::Shard(shard)),
                    (None, worker) => worker.map(proto::decoded_snowflake::Node::Worker),
                },
                sequence,
            }),
        ),
        api::Decoded::Uuid7 {
            namespace,
            id,
            timestamp,
            unix_ms,
        } => {
            // The domain wrote the text from a parsed UUIDv7: reading it back cannot fail.
            let bytes = id
                .parse::<Uuid7>()
                .map(|u| u.to_bytes().to_vec())
                .unwrap_or_default();
            (
                namespace,
                Kind::Uuid7(proto::DecodedTime {
                    id,
                    bytes,
                    timestamp,
                    unix_ms,
                }),
            )
        }
        api::Decoded::Ulid {
            namespace,
            id,
            timestamp,
            unix_ms,
        } => {
            let bytes = id
                .parse::<Ulid>()
                .map(|u| u.to_bytes().to_vec())
                .unwrap_or_default();
            (
                namespace,
                Kind::Ulid(proto::DecodedTime {
                    id,
                    bytes,
                    timestamp,
                    unix_ms,
                }),
            )
        }
        // A kind added to the API after this front-end: `kind` stays unset, as a client of an
        // older `.proto` reads a newer answer.
        _ => return proto::Decoded::default(),
    };
    proto::Decoded {
        namespace,
        kind: Some(kind),
    }
}

/// A namespace's settings and state.
pub fn namespace_info(info: api::NamespaceInfo) -> proto::NamespaceInfo {
    use proto::namespace_info::Kind;
    let (namespace, kind) = match info {
        api::NamespaceInfo::Sequence {
            namespace,
            auto_created,
            family,
            settings,
            state,
        } => (
            namespace,
            Kind::Sequence(proto::SequenceInfo {
                auto_created,
                family: family.unwrap_or_default(),
                settings: Some(sequence_settings(settings)),
                state: Some(sequence_state(state)),
            }),
        ),
        api::NamespaceInfo::Snowflake {
            namespace,
            settings,
            state,
        } => (
            namespace,
            Kind::Snowflake(proto::SnowflakeInfo {
                worker: settings.worker,
                layout: Some(layout(settings.layout)),
                ids_served: state.ids_served,
                last_timestamp: state.last_timestamp,
                time_runs_out: state.time_runs_out,
                seconds_to_exhaustion: state.seconds_to_exhaustion,
                worker_pool: state.worker_pool.map(|p| proto::WorkerPool {
                    group: p.group,
                    possible: p.possible,
                    held: p.held,
                    error: p.error,
                }),
                sequence_headroom: state.sequence_headroom.map(|h| proto::SequenceHeadroom {
                    limit_per_unit: h.limit_per_unit,
                    limit_per_second: h.limit_per_second,
                    peak_per_unit: h.peak_per_unit,
                    peak_fraction: h.peak_fraction,
                    headroom_per_unit: h.headroom_per_unit,
                    units_exhausted: h.units_exhausted,
                    window_seconds: h.window_seconds,
                }),
                shards: state.shards.map(|m| proto::ShardMap {
                    logical_shards: m.logical_shards,
                    shard_range: m.shard_range,
                    this_node: m.this_node,
                    ranges: m
                        .ranges
                        .into_iter()
                        .map(|r| proto::ShardRangeHolder {
                            range: r.range,
                            first_shard: r.first_shard,
                            last_shard: r.last_shard,
                            holder: r.holder,
                        })
                        .collect(),
                    error: m.error,
                }),
            }),
        ),
        api::NamespaceInfo::Uuid7 { namespace } => (namespace, Kind::Uuid7(proto::Uuid7Info {})),
        api::NamespaceInfo::Ulid { namespace } => (namespace, Kind::Ulid(proto::UlidInfo {})),
        other => {
            return proto::NamespaceInfo {
                namespace: other.name().to_owned(),
                kind: None,
            }
        }
    };
    proto::NamespaceInfo {
        namespace,
        kind: Some(kind),
    }
}

fn sequence_settings(s: api::SequenceSettings) -> proto::SequenceSettings {
    let mut out = proto::SequenceSettings {
        width: s.width,
        start: s.start,
        step: s.step,
        offset: s.offset,
        residues: s.residues,
        ..Default::default()
    };
    let mode = match s.cache {
        api::CacheSettings::Off => proto::CacheMode::Off,
        api::CacheSettings::Fixed {
            block_size,
            low_water,
        } => {
            out.block_size = block_size;
            out.low_water = low_water;
            proto::CacheMode::Fixed
        }
        api::CacheSettings::Adaptive {
            buffer_seconds,
            min_block,
            max_block,
            low_water,
        } => {
            out.buffer_seconds = buffer_seconds;
            out.min_block = min_block;
            out.max_block = max_block;
            out.low_water = low_water;
            proto::CacheMode::Adaptive
        }
        // A mode added to the API later: named as unspecified rather than guessed.
        _ => proto::CacheMode::Unspecified,
    };
    out.set_cache(mode);
    out
}

fn sequence_state(s: api::SequenceState) -> proto::SequenceState {
    proto::SequenceState {
        watermark: s.watermark,
        retired: s.retired,
        ids_buffered: s.ids_buffered,
        demand_per_second: s.demand_per_second,
        block_size: s.block_size,
        ids_served: s.ids_served,
        ids_burned: s.ids_burned,
        ids_reserved: s.ids_reserved,
        ids_given_back: s.ids_given_back,
        refills: s.refills,
        ids_used: s.ids_used,
        capacity: s.capacity,
        used_fraction: s.used_fraction,
        projected_exhaustion: s.projected_exhaustion,
        projection_window_seconds: s.projection_window_seconds,
        last_error: s.last_error,
        members: s
            .members
            .into_iter()
            .map(|m| proto::MemberState {
                number: m.number as u64,
                kind: m.kind,
                offset: m.offset,
                up: m.up,
                last_error: m.last_error,
                out_of_service: m.out_of_service,
            })
            .collect(),
        leader: s.leader.map(|l| proto::LeaderState {
            role: l.role,
            url: l.url.unwrap_or_default(),
            holder: l.holder.unwrap_or_default(),
            term: l.term.unwrap_or_default(),
            reason: l.reason.unwrap_or_default(),
        }),
    }
}

fn layout(l: api::LayoutSettings) -> proto::Layout {
    let mut out = proto::Layout {
        timestamp_bits: l.timestamp_bits.into(),
        node_bits: l.node_bits.into(),
        sequence_bits: l.sequence_bits.into(),
        time_unit: l.time_unit,
        epoch: l.epoch,
        epoch_unix_ms: l.epoch_unix_ms,
        order: 0,
        time_unit_ns: l.time_unit_ns,
        max_bits: l.max_bits.into(),
    };
    out.set_order(match l.order {
        api::FieldOrder::NodeThenSequence => proto::FieldOrder::NodeThenSequence,
        api::FieldOrder::SequenceThenNode => proto::FieldOrder::SequenceThenNode,
    });
    out
}
