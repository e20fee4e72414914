//! One namespace at run time: what it hands out, what it says about itself, and how it reads
//! its own ids. This is the domain every front-end (HTTP and gRPC; RESP next) calls: a
//! front-end parses its protocol, calls [`Namespace::ids`] (or [`Namespace::ids_routed`] for a
//! request that names a shard, [`route`]), [`Namespace::block`] (or
//! [`Namespace::lease`] and [`Namespace::take_back`] for a lower tier that hands tails back),
//! [`Namespace::info`] or [`Namespace::decode`], and formats the answer or maps the
//! [`IdError`]; it computes nothing itself.
//!
//! Ids stay integers here ([`Ids`]: `u64` for sequence and snowflake, `u128` for UUIDv7 and
//! ULID); a front-end formats them.
//!
//! Invariants: a sequence namespace's ids come only from its `Supply` (see its docs); the
//! answers of [`Namespace::info`] and [`Namespace::decode`] are reads: they never reserve,
//! create or change anything. A [`NamespaceView`] is what a read works on: a namespace this node
//! serves, or a [`StoredSequence`] built from the authority's stored state for one it has not
//! loaded (no buffer, no refill task, nothing reserved).
//!
//! Every time is written with [`idmint_core::layout::rfc3339_millis`], which is total: a time
//! RFC 3339 cannot write (after the year 9999) is `None`, never a panic.
//!
//! Exhaustion foresight of a snowflake namespace (docs/api.md): [`Namespace::info`] dates when
//! the layout's timestamp bits run out and reports the sequence headroom ([`headroom`]); the
//! worker pool usage needs a read of the group's leases in the authority, which only
//! [`Namespace::info_live`] makes (a read: [`idmint_store::WorkerLeases::group`], bounded by
//! [`POOL_READ_TIMEOUT`]).

pub mod headroom;
pub mod route;
pub mod served_window;
pub mod snowflake;

pub use snowflake::SnowflakeNamespace;

use crate::block_gate::IdSpace;
use crate::config::CacheMode;
use crate::error::IdError;
use crate::strict::Strict;
use crate::supply::{Lease, Supply, SupplySnapshot, TakeBack};
use idmint_api as api;
use idmint_core::{
    Block, NamespaceName, SequenceSpec, Sizing, Ulid, UlidGenerator, Uuid7, Uuid7Generator,
};
use prometheus_client::metrics::counter::Counter;
use served_window::{ServedRate, ServedWindow};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long [`Namespace::info_live`] waits for the authority's leases before it reports the
/// worker pool as unknown.
pub const POOL_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Ids of one answer, increasing, as integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ids {
    /// Sequence or snowflake ids.
    U64(Vec<u64>),
    /// UUIDv7s.
    Uuid7(Vec<Uuid7>),
    /// ULIDs.
    Ulid(Vec<Ulid>),
}

impl Ids {
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Ids::U64(v) => v.len(),
            Ids::Uuid7(v) => v.len(),
            Ids::Ulid(v) => v.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A namespace being served.
#[derive(Debug)]
pub enum Namespace {
    /// Integers from leased blocks.
    Sequence(SequenceNamespace),
    /// Snowflake ids.
    Snowflake(SnowflakeNamespace),
    /// UUIDv7, with its `ids_served` series.
    Uuid7(NamespaceName, Uuid7Generator, Counter),
    /// ULID, with its `ids_served` series.
    Ulid(NamespaceName, UlidGenerator, Counter),
}

impl Namespace {
    /// The namespace's name.
    pub fn name(&self) -> &NamespaceName {
        match self {
            Namespace::Sequence(s) => s.supply.name(),
            Namespace::Snowflake(s) => s.name(),
            Namespace::Uuid7(n, ..) | Namespace::Ulid(n, ..) => n,
        }
    }

    /// The shard leases of a snowflake namespace with `shards = "owned"`.
    pub fn owned_shards(&self) -> Option<&Arc<crate::shards::OwnedShards>> {
        match self {
            Namespace::Snowflake(s) => s.owned_shards(),
            _ => None,
        }
    }

    /// `sequence`, `snowflake`, `uuid7` or `ulid`.
    pub fn kind(&self) -> &'static str {
        match self {
            Namespace::Sequence(_) => "sequence",
            Namespace::Snowflake(_) => "snowflake",
            Namespace::Uuid7(..) => "uuid7",
            Namespace::Ulid(..) => "ulid",
        }
    }

    /// `count` ids, increasing. Fewer only when a sequence namespace runs out of ids.
    pub async fn ids(&self, count: u64) -> Result<Ids, IdError> {
        match self {
            Namespace::Sequence(s) => s.ids(count).await.map(Ids::U64),
            Namespace::Snowflake(s) => s.ids(count).await.map(Ids::U64),
            Namespace::Uuid7(_, g, served) => {
                served.inc_by(count);
                Ok(Ids::Uuid7((0..count).map(|_| g.next_uuid()).collect()))
            }
            Namespace::Ulid(_, g, served) => {
                served.inc_by(count);
                Ok(Ids::Ulid((0..count).map(|_| g.next_ulid()).collect()))
            }
        }
    }

    /// One contiguous block of up to `count` ids, for a lower tier. Sequence namespaces only.
    pub async fn block(&self, count: u64) -> Result<Block, IdError> {
        match self {
            Namespace::Sequence(s) => s.block(count).await,
            other => Err(IdError::WrongKind(format!(
                "namespace {:?} is a {} namespace; blocks exist only for sequence namespaces",
                other.name().as_str(),
                other.kind()
            ))),
        }
    }

    /// Like [`Namespace::block`], leased to a lower tier that may hand the unused tail back
    /// ([`Namespace::take_back`]). Sequence namespaces only.
    pub async fn lease(&self, count: u64, min_start: u64, extends: u64) -> Result<Lease, IdError> {
        match self {
            Namespace::Sequence(s) => s.lease(count, min_start, extends).await,
            other => Err(other.no_blocks()),
        }
    }

    /// Takes back the unused tail of the block leased with `token` (see
    /// `Supply::take_back`: accepted only when no id could be handed out twice).
    pub fn take_back(&self, token: u64, tail: Block) -> Result<TakeBack, IdError> {
        match self {
            Namespace::Sequence(s) => Ok(s.take_back(token, tail)),
            other => Err(other.no_blocks()),
        }
    }

    fn no_blocks(&self) -> IdError {
        IdError::WrongKind(format!(
            "namespace {:?} is a {} namespace; blocks exist only for sequence namespaces",
            self.name().as_str(),
            self.kind()
        ))
    }

    /// Settings and live state; `now` dates the projected exhaustion and the time left to a
    /// snowflake layout. A snowflake namespace's `worker_pool` is left `null` here: only
    /// [`Namespace::info_live`] reads the authority.
    pub fn info(&self, now: SystemTime) -> api::NamespaceInfo {
        let namespace = self.name().to_string();
        match self {
            Namespace::Sequence(s) => s.info(namespace, now),
            Namespace::Snowflake(s) => s.info(namespace, now),
            Namespace::Uuid7(..) => api::NamespaceInfo::Uuid7 { namespace },
            Namespace::Ulid(..) => api::NamespaceInfo::Ulid { namespace },
        }
    }

    /// [`Namespace::info`] with what only the authority knows: a snowflake namespace's worker
    /// pool, read from `authority`'s leases of its group within [`POOL_READ_TIMEOUT`]. A read:
    /// nothing is created, renewed or reserved.
    pub async fn info_live(
        &self,
        now: SystemTime,
        authority: &dyn idmint_store::Authority,
    ) -> api::NamespaceInfo {
        let mut info = self.info(now);
        if let (Namespace::Snowflake(s), api::NamespaceInfo::Snowflake { state, .. }) =
            (self, &mut info)
        {
            (state.worker_pool, state.shards) = s.live_state(authority, POOL_READ_TIMEOUT).await;
        }
        info
    }

    /// What the id `text` (decimal, or UUID/ULID text by kind) says about itself, read as an id
    /// of this namespace. [`IdError::InvalidId`] if it is not an id of this kind.
    pub fn decode(&self, text: &str) -> Result<api::Decoded, IdError> {
        let namespace = self.name().to_string();
        match self {
            Namespace::Sequence(s) => decode_sequence(
                namespace,
                s.supply.space(),
                s.supply.snapshot().watermark,
                text,
            ),
            Namespace::Snowflake(s) => {
                let id = parse_u64_id(text)?;
                let d = s
                    .layout()
                    .decode(id)
                    .map_err(|e| IdError::InvalidId(e.to_string()))?;
                let node = d.parts.node;
                let (worker, shard) = match s.layout().node_field() {
                    idmint_core::NodeField::Worker => (Some(node), None),
                    idmint_core::NodeField::Shard => (None, Some(node)),
                };
                Ok(api::Decoded::Snowflake {
                    namespace,
                    id,
                    timestamp: d.rfc3339(),
                    unix_ms: d.unix_millis(),
                    worker,
                    shard,
                    sequence: d.parts.sequence,
                })
            }
            Namespace::Uuid7(..) => {
                let u: Uuid7 = text
                    .parse()
                    .map_err(|e| IdError::InvalidId(format!("{text:?} is not a UUIDv7: {e}")))?;
                Ok(api::Decoded::Uuid7 {
                    namespace,
                    id: u.to_string(),
                    timestamp: u.rfc3339(),
                    unix_ms: u.unix_millis(),
                })
            }
            Namespace::Ulid(..) => {
                let u: Ulid = text
                    .parse()
                    .map_err(|e| IdError::InvalidId(format!("{text:?} is not a ULID: {e}")))?;
                Ok(api::Decoded::Ulid {
                    namespace,
                    id: u.to_string(),
                    timestamp: u.rfc3339(),
                    unix_ms: u.unix_millis(),
                })
            }
        }
    }
}

/// A decimal id: ASCII digits only (`u64::from_str` alone also takes a leading `+`, which no
/// server writes and the OpenAPI document's id pattern excludes), fitting 64 bits.
fn parse_u64_id(id: &str) -> Result<u64, IdError> {
    let digits = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| id.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| IdError::InvalidId(format!("{id:?} is not a decimal 64-bit id")))
}

/// `text` read as an id of a sequence namespace of `space` whose watermark is `watermark` (with a
/// multi authority, an id of any member's residue class is in the namespace).
fn decode_sequence(
    namespace: String,
    space: &IdSpace,
    watermark: u64,
    text: &str,
) -> Result<api::Decoded, IdError> {
    let id = parse_u64_id(text)?;
    let in_namespace = space.contains(id);
    Ok(api::Decoded::Sequence {
        namespace,
        id,
        in_namespace,
        issued: in_namespace && id < watermark,
        step: Some(space.spec().step()),
        residue: Some(space.residue_of(id)),
        member: space.member_of(id).and_then(|m| u32::try_from(m).ok()),
    })
}

/// `t` as RFC 3339; `None` before 1970 or after the year 9999.
fn rfc3339(t: SystemTime) -> Option<String> {
    let ms = u64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    idmint_core::layout::rfc3339_millis(ms)
}

/// `unix_ms` as RFC 3339, for a field the wire always fills; past 9999 (which the callers' times
/// cannot reach: they come from `u64` nanoseconds or a parsed RFC 3339 date) it says so instead.
fn rfc3339_ms(unix_ms: u64) -> String {
    idmint_core::layout::rfc3339_millis(unix_ms)
        .unwrap_or_else(|| format!("{unix_ms} ms after 1970 (past the year 9999)"))
}

/// What a read (`info`, `decode`) works on: a namespace this node serves, or the stored state of
/// one it has not loaded. Building one never creates or reserves anything.
#[derive(Debug)]
pub enum NamespaceView {
    /// Served by this node.
    Served(Arc<Namespace>),
    /// Known to the authority, not loaded here.
    Stored(StoredSequence),
}

impl NamespaceView {
    /// Settings and state, as [`Namespace::info`].
    pub fn info(&self, now: SystemTime) -> api::NamespaceInfo {
        match self {
            NamespaceView::Served(ns) => ns.info(now),
            NamespaceView::Stored(s) => s.info(),
        }
    }

    /// Settings and state with the worker pool read from `authority`, as
    /// [`Namespace::info_live`].
    pub async fn info_live(
        &self,
        now: SystemTime,
        authority: &dyn idmint_store::Authority,
    ) -> api::NamespaceInfo {
        match self {
            NamespaceView::Served(ns) => ns.info_live(now, authority).await,
            NamespaceView::Stored(s) => s.info(),
        }
    }

    /// What an id says about itself, as [`Namespace::decode`].
    pub fn decode(&self, text: &str) -> Result<api::Decoded, IdError> {
        match self {
            NamespaceView::Served(ns) => ns.decode(text),
            NamespaceView::Stored(s) => {
                decode_sequence(s.name.to_string(), &s.space, s.watermark, text)
            }
        }
    }
}

/// A sequence namespace as the authority stores it (spec and watermark), read by a node that does
/// not serve it (yet): it has no buffer, no demand and has served nothing.
#[derive(Debug, Clone)]
pub struct StoredSequence {
    name: NamespaceName,
    space: IdSpace,
    watermark: u64,
    retired: bool,
    cache: CacheMode,
}

impl StoredSequence {
    /// The stored ids (`space`), `watermark` and retired mark of `name`; `cache` is what the
    /// node would serve it with.
    pub fn new(
        name: NamespaceName,
        space: IdSpace,
        (watermark, retired): (u64, bool),
        cache: CacheMode,
    ) -> Self {
        StoredSequence {
            name,
            space,
            watermark,
            retired,
            cache,
        }
    }

    fn info(&self) -> api::NamespaceInfo {
        let snapshot = SupplySnapshot {
            buffered: 0,
            stats: Default::default(),
            demand_per_sec: 0.0,
            target_block: 0,
            served: 0,
            reserved: 0,
            watermark: self.watermark,
            retired: self.retired,
            source_requests_peak: 0,
            block_requests_peak: 0,
        };
        // No demand: no projected exhaustion, so `now` is not needed.
        sequence_info(
            self.name.to_string(),
            false,
            &self.space,
            self.cache,
            Reading {
                snapshot,
                last_error: None,
                served_rate: None,
            },
            UNIX_EPOCH,
        )
    }
}

/// A sequence namespace: its spec and its supply of blocks.
#[derive(Debug)]
pub struct SequenceNamespace {
    spec: SequenceSpec,
    supply: Arc<Supply>,
    auto_created: bool,
    /// Ids served over the last hour, for the exhaustion projection.
    served: ServedWindow,
    /// `order = "strict"`: its leader serves it, the other nodes forward.
    strict: Option<Arc<Strict>>,
}

impl SequenceNamespace {
    /// A namespace of `spec` served from `supply`.
    pub fn new(spec: SequenceSpec, supply: Arc<Supply>) -> Self {
        SequenceNamespace {
            spec,
            supply,
            auto_created: false,
            served: ServedWindow::default(),
            strict: None,
        }
    }

    /// Served in strict order by `strict` (whose supply is this namespace's).
    pub fn strict(self, strict: Arc<Strict>) -> Self {
        SequenceNamespace {
            strict: Some(strict),
            ..self
        }
    }

    /// The strict side, for a namespace of `order = "strict"`.
    pub fn strict_order(&self) -> Option<&Arc<Strict>> {
        self.strict.as_ref()
    }

    /// A lower tier's block would be served outside the leader's order.
    fn no_blocks_in_strict_order(&self) -> Result<(), IdError> {
        match &self.strict {
            Some(_) => Err(IdError::WrongKind(format!(
                "namespace {:?} is in strict order: only its leader hands out its ids, so it \
                 grants no blocks to a lower tier",
                self.supply.name().as_str()
            ))),
            None => Ok(()),
        }
    }

    /// Samples the ids served and refills made so far at `now_nanos` (monotonic), for the
    /// projection and the history ([`served_window`]); the node calls it once a second.
    pub fn sample_served(&self, now_nanos: u64) {
        let snapshot = self.supply.snapshot();
        self.served
            .record(now_nanos, snapshot.served, snapshot.stats.refills);
    }

    /// Ids served and refills per kept minute of the last hour ([`ServedWindow::history`]).
    pub fn history(&self) -> Vec<served_window::Delta> {
        self.served.history()
    }

    /// How long until the namespace runs out at the rate of the last hour, and that window.
    pub fn time_to_exhaustion(&self) -> Option<(Duration, Duration)> {
        let rate = self.served.rate()?;
        let left = ids_left(self.supply.space(), self.supply.snapshot().watermark);
        projection(left, rate).map(|d| (d, rate.observed))
    }

    /// Marks it as created on first use (auto-create), not declared: listings say so.
    pub fn auto_created(self, auto_created: bool) -> Self {
        SequenceNamespace {
            auto_created,
            ..self
        }
    }

    /// Whether it was created on first use rather than declared.
    pub fn is_auto_created(&self) -> bool {
        self.auto_created
    }

    /// The spec.
    pub fn spec(&self) -> SequenceSpec {
        self.spec
    }

    /// The supply (buffer, refill, hand-back).
    pub fn supply(&self) -> &Arc<Supply> {
        &self.supply
    }

    /// Whether `id` is one this namespace may ever hand out.
    pub fn contains(&self, id: u64) -> bool {
        self.supply.space().contains(id)
    }

    /// `count` ids, increasing; fewer only when the namespace runs out.
    pub async fn ids(&self, count: u64) -> Result<Vec<u64>, IdError> {
        match &self.strict {
            Some(strict) => strict.take(count, false).await,
            None => self.supply.ids(count, self.spec.width().bits()).await,
        }
    }

    /// One contiguous block of up to `count` ids.
    pub async fn block(&self, count: u64) -> Result<Block, IdError> {
        self.no_blocks_in_strict_order()?;
        self.supply.block(count, self.spec.width().bits()).await
    }

    /// Exactly `count` consecutive ids (`Supply::consecutive`), or `None` when the blocks
    /// kept holding fewer.
    pub async fn consecutive(&self, count: u64) -> Result<Option<Block>, IdError> {
        if let Some(strict) = &self.strict {
            let ids = strict.take(count, true).await?;
            let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
                return Ok(None);
            };
            let step = self.spec.step();
            let whole = ids.len() as u64 == count && ids.windows(2).all(|w| w[1] - w[0] == step);
            return Ok(whole
                .then(|| {
                    last.checked_add(step)
                        .and_then(|end| Block::new(first, end, step))
                })
                .flatten());
        }
        self.supply
            .consecutive(count, self.spec.width().bits())
            .await
    }

    /// One contiguous block of up to `count` ids, leased so that its unused tail may come back
    /// ([`SequenceNamespace::take_back`]); starting at or above `min_start` unless the
    /// namespace's store has nothing there yet, and joined to the caller's previous lease
    /// `extends` where it can be (`Supply::lease`).
    pub async fn lease(&self, count: u64, min_start: u64, extends: u64) -> Result<Lease, IdError> {
        self.no_blocks_in_strict_order()?;
        self.supply
            .lease(count, self.spec.width().bits(), min_start, extends)
            .await
    }

    /// Takes back the unused tail of the newest leased block (`Supply::take_back`).
    pub fn take_back(&self, token: u64, tail: Block) -> TakeBack {
        self.supply.take_back(token, tail)
    }

    fn info(&self, namespace: String, now: SystemTime) -> api::NamespaceInfo {
        let mut info = sequence_info(
            namespace,
            self.auto_created,
            self.supply.space(),
            self.supply.cache(),
            Reading {
                snapshot: self.supply.snapshot(),
                last_error: self.supply.last_error(),
                served_rate: self.served.rate(),
            },
            now,
        );
        if let (Some(strict), api::NamespaceInfo::Sequence { state, .. }) =
            (&self.strict, &mut info)
        {
            state.leader = Some(strict.leader_state());
        }
        info
    }
}

/// Ids of `space` at or above `watermark`.
fn ids_left(space: &IdSpace, watermark: u64) -> u64 {
    let spec = space.spec();
    spec.capacity()
        .saturating_sub(spec.ids_between(spec.first(), watermark))
}

/// How long `left` ids last at `rate`: none without demand, or beyond a thousand years (the
/// date would mean nothing).
fn projection(left: u64, rate: ServedRate) -> Option<Duration> {
    (rate.per_second > 1e-3)
        .then(|| left as f64 / rate.per_second)
        .filter(|secs| *secs < 3.15e10)
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
}

/// What a sequence namespace's info reads of its supply.
struct Reading {
    snapshot: SupplySnapshot,
    last_error: Option<String>,
    /// The rate served over the last hour, for the projection.
    served_rate: Option<ServedRate>,
}

/// The info of a sequence namespace of `spec` served with `cache`, in the state `reading`.
fn sequence_info(
    namespace: String,
    auto_created: bool,
    space: &IdSpace,
    cache: CacheMode,
    reading: Reading,
    now: SystemTime,
) -> api::NamespaceInfo {
    let Reading {
        snapshot,
        last_error,
        served_rate,
    } = reading;
    let spec = space.spec();
    let cache = match cache {
        CacheMode::Off => api::CacheSettings::Off,
        CacheMode::Buffered(p) => match p.config().sizing {
            Sizing::Fixed(n) => api::CacheSettings::Fixed {
                block_size: n,
                low_water: p.config().low_water,
            },
            Sizing::Adaptive {
                buffer_seconds,
                min_block,
                max_block,
            } => api::CacheSettings::Adaptive {
                buffer_seconds,
                min_block,
                max_block,
                low_water: p.config().low_water,
            },
        },
    };
    let SupplySnapshot {
        buffered,
        stats,
        demand_per_sec,
        target_block,
        served,
        reserved,
        watermark,
        retired,
        ..
    } = snapshot;
    let capacity = spec.capacity();
    let used = spec.ids_between(spec.first(), watermark);
    let used_fraction = if capacity == 0 {
        1.0
    } else {
        used as f64 / capacity as f64
    };
    let projected_exhaustion = served_rate
        .and_then(|rate| projection(ids_left(space, watermark), rate))
        .and_then(|d| now.checked_add(d))
        .and_then(rfc3339);
    api::NamespaceInfo::Sequence {
        namespace,
        auto_created,
        family: None,
        settings: api::SequenceSettings {
            width: spec.width().bits(),
            start: spec.first(),
            step: spec.step(),
            offset: spec.offset(),
            residues: space.residues().to_vec(),
            cache,
        },
        state: api::SequenceState {
            watermark,
            retired,
            ids_buffered: buffered,
            demand_per_second: demand_per_sec,
            block_size: target_block,
            ids_served: served,
            ids_burned: stats.burned,
            ids_reserved: reserved,
            ids_given_back: stats.given_back,
            refills: stats.refills,
            ids_used: used,
            capacity,
            used_fraction,
            projected_exhaustion,
            projection_window_seconds: served_rate.map_or(0, |rate| rate.observed.as_secs()),
            last_error,
            members: Vec::new(),
            leader: None,
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Found by Schemathesis (negative data): `+7` decoded as 7, though the API's ids are digits
    /// only and the OpenAPI document's id pattern says so.
    #[test]
    fn decimal_ids_are_digits_only() {
        assert_eq!(parse_u64_id("7").unwrap(), 7);
        assert_eq!(parse_u64_id("007").unwrap(), 7);
        assert_eq!(parse_u64_id("18446744073709551615").unwrap(), u64::MAX);
        for bad in ["+7", "-7", "", " 7", "7 ", "18446744073709551616", "٣"] {
            assert_eq!(
                parse_u64_id(bad).unwrap_err().code(),
                idmint_api::ErrorCode::InvalidId,
                "{bad:?}"
            );
        }
    }
}
