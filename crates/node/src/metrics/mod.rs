//! Prometheus metrics of a node, exposed as text at `/metrics`.
//!
//! Counters are updated on the request and refill paths; gauges that mirror buffer state
//! (buffered ids, demand, burned ids) are refreshed from the namespaces at scrape time, so the
//! hot path pays only for an atomic increment. So is `idmint_authority_member_up`, one series per
//! member of a multi authority ([`Metrics::refresh_members`], from [`Authority::members`]: no
//! I/O at scrape time); a single authority has none.
//!
//! [`Authority::members`]: idmint_store::Authority::members
//!
//! A snowflake namespace's exhaustion foresight is exported from its API state at scrape time
//! ([`Metrics::refresh_snowflake`]): the time left to its layout's last timestamp, its worker
//! pool (leases held and worker ids possible; a pool the authority could not report has no
//! series rather than a stale one) and its sequence headroom. The scrape reads each group's
//! leases from the authority (a read, bounded by a timeout), as the namespace detail does.
//!
//! Two text formats are served, chosen from the scraper's `Accept` header by [`Format::negotiate`]:
//! OpenMetrics 1.0.0 when asked for, otherwise the Prometheus text format 0.0.4 (what
//! `promtool check metrics`, older Prometheus servers and most other scrapers read).
//! prometheus-client 0.25 writes only OpenMetrics text, so the 0.0.4 text is derived from it by
//! [`openmetrics_to_prometheus`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

/// Labels of per-namespace series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabels {
    /// Namespace name.
    pub namespace: String,
}

/// Labels of refill outcomes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefillLabels {
    /// Namespace name.
    pub namespace: String,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// Labels of a multi authority's members.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberLabels {
    /// The member's place in the config, counted from 1.
    pub member: String,
    /// The member's kind.
    pub kind: String,
    /// The residue class it owns.
    pub offset: String,
}

/// Labels of errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The API error code.
    pub code: &'static str,
}

/// Labels of gRPC requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    /// The method, e.g. `Next`.
    pub method: &'static str,
    /// The gRPC status code, snake_case: `ok`, `not_found`, `unavailable`, ...
    pub code: &'static str,
}

/// Labels of RESP commands.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RespLabels {
    /// The command, lower-case (`incr`, `idmint.next`, ...); `unparsed` for a request that was
    /// not a command idmint runs (unknown, wrong arity, bad argument).
    pub command: &'static str,
    /// `ok`, or `error` for an error reply.
    pub outcome: &'static str,
}

/// Labels of a token's series (`[[auth.tokens]]`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    /// The token's name, or the first 12 hex digits of its hash; never the token.
    pub token: String,
}

/// Labels of refused requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// As [`AuthLabels::token`]; `none` without a token, `unknown` for a token the node does
    /// not know.
    pub token: String,
    /// `unauthorized`, `forbidden`, `max_count` or `rate_limited`.
    pub reason: &'static str,
}

/// All metrics of a node.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Ids handed out.
    pub ids_served: Family<NamespaceLabels, Counter>,
    /// Refills by outcome.
    pub refills: Family<RefillLabels, Counter>,
    /// Refill round-trip time.
    pub refill_seconds: Family<NamespaceLabels, Histogram>,
    /// Error responses by code.
    pub errors: Family<ErrorLabels, Counter>,
    /// Ids buffered now.
    pub buffered: Family<NamespaceLabels, Gauge>,
    /// Ids burned so far in this process's life.
    pub burned: Family<NamespaceLabels, Gauge>,
    /// Ids reserved from the authority so far in this process's life.
    pub reserved: Family<NamespaceLabels, Gauge>,
    /// Ids handed back to the authority so far in this process's life.
    pub given_back: Family<NamespaceLabels, Gauge>,
    /// Demand average, ids per second.
    pub demand: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// Wall clock behind a snowflake generator's time, seconds.
    pub clock_behind: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// Requests that found the buffer short and waited for a refill.
    pub refill_waits: Family<NamespaceLabels, Counter>,
    /// The most reservations from the source (authority or tier above) ever in flight at once.
    pub source_requests_peak: Family<NamespaceLabels, Gauge>,
    /// The most block requests of a lower tier ever answered at once.
    pub block_requests_peak: Family<NamespaceLabels, Gauge>,
    /// 1 while a multi authority's member answers, 0 while it is down.
    pub member_up: Family<MemberLabels, Gauge>,
    /// Ids of a sequence namespace below its watermark, as a fraction of all it can hold.
    pub sequence_used_ratio: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// Seconds until a sequence namespace runs out at the rate it served over the last hour
    /// (+Inf without demand).
    pub sequence_time_to_exhaustion: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// 1 while the authority answered the latest readiness probe, 0 while it did not.
    pub authority_up: Gauge,
    /// 1 while the latest readiness probe found every declared namespace able to serve.
    pub ready: Gauge,
    /// gRPC requests answered, by method and status code (a stream counts once, when it ends).
    pub grpc_requests: Family<GrpcLabels, Counter>,
    /// RESP commands answered, by command and outcome.
    pub resp_commands: Family<RespLabels, Counter>,
    /// Ids handed out per token (authentication on).
    pub auth_ids: Family<AuthLabels, Counter>,
    /// Requests refused by authentication, scopes or quotas, per token and reason.
    pub auth_refused: Family<RefusedLabels, Counter>,
    /// Seconds until a snowflake layout's timestamp bits run out.
    pub snowflake_time_left: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// Live worker leases of a snowflake namespace's group.
    pub snowflake_workers_held: Family<NamespaceLabels, Gauge>,
    /// Worker ids a snowflake namespace's layout allows.
    pub snowflake_workers_possible: Family<NamespaceLabels, Gauge>,
    /// `held / possible`.
    pub snowflake_worker_pool_used: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// Ids a worker may issue per time unit.
    pub snowflake_sequence_limit: Family<NamespaceLabels, Gauge>,
    /// The peak ids per time unit of the last one to two windows.
    pub snowflake_sequence_peak: Family<NamespaceLabels, Gauge>,
    /// `peak / limit`.
    pub snowflake_sequence_peak_used: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// Requests that found their time unit's sequence used up and waited for the next unit.
    pub snowflake_sequence_exhausted: Family<NamespaceLabels, Counter>,
    /// 1 while a snowflake namespace's worker lease is held (or being renewed), 0 once lost.
    pub snowflake_lease_held: Family<NamespaceLabels, Gauge>,
    /// Strict namespaces: 1 while this node leads, else 0 (summed over the nodes: how many
    /// lead, which is 1 but during a failover).
    pub strict_leader: Family<NamespaceLabels, Gauge>,
    /// Strict namespaces: 1 while this node knows a leader (itself or another), 0 while it
    /// looks for one (its requests wait, then answer `no_leader`).
    pub strict_leader_known: Family<NamespaceLabels, Gauge>,
    /// Owned shards: ranges whose lease this node holds.
    pub shard_ranges_held: Family<NamespaceLabels, Gauge>,
    /// Owned shards: requests forwarded to a range's holder, and those whose forward failed
    /// (the holder unreachable or no longer holding: the node looks the range up again).
    pub shard_forwards: Family<NamespaceLabels, Counter>,
    /// See `shard_forwards`.
    pub shard_forward_failures: Family<NamespaceLabels, Counter>,
}

/// The labels of `idmint_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    ])
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        // The node's families under `idmint_`; the process's under the standard `process_`.
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("idmint");
        let ids_served = Family::<NamespaceLabels, Counter>::default();
        let refills = Family::<RefillLabels, Counter>::default();
        let refill_seconds = Family::<NamespaceLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        let buffered = Family::<NamespaceLabels, Gauge>::default();
        let burned = Family::<NamespaceLabels, Gauge>::default();
        let reserved = Family::<NamespaceLabels, Gauge>::default();
        let given_back = Family::<NamespaceLabels, Gauge>::default();
        let demand = Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let clock_behind = Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let refill_waits = Family::<NamespaceLabels, Counter>::default();
        let source_requests_peak = Family::<NamespaceLabels, Gauge>::default();
        let block_requests_peak = Family::<NamespaceLabels, Gauge>::default();
        let member_up = Family::<MemberLabels, Gauge>::default();
        let authority_up = Gauge::default();
        let sequence_used_ratio = Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let sequence_time_to_exhaustion =
            Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let ready = Gauge::default();
        let grpc_requests = Family::<GrpcLabels, Counter>::default();
        let resp_commands = Family::<RespLabels, Counter>::default();
        let auth_ids = Family::<AuthLabels, Counter>::default();
        let auth_refused = Family::<RefusedLabels, Counter>::default();
        let snowflake_time_left = Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let snowflake_workers_held = Family::<NamespaceLabels, Gauge>::default();
        let snowflake_workers_possible = Family::<NamespaceLabels, Gauge>::default();
        let snowflake_worker_pool_used =
            Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let snowflake_sequence_limit = Family::<NamespaceLabels, Gauge>::default();
        let snowflake_sequence_peak = Family::<NamespaceLabels, Gauge>::default();
        let snowflake_lease_held = Family::<NamespaceLabels, Gauge>::default();
        let snowflake_sequence_peak_used =
            Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let snowflake_sequence_exhausted = Family::<NamespaceLabels, Counter>::default();
        let strict_leader = Family::<NamespaceLabels, Gauge>::default();
        let strict_leader_known = Family::<NamespaceLabels, Gauge>::default();
        let shard_ranges_held = Family::<NamespaceLabels, Gauge>::default();
        let shard_forwards = Family::<NamespaceLabels, Counter>::default();
        let shard_forward_failures = Family::<NamespaceLabels, Counter>::default();
        registry.register(
            "shard_ranges_held",
            "Owned shards: ranges of shards whose lease this node holds",
            shard_ranges_held.clone(),
        );
        registry.register(
            "shard_forwards",
            "Owned shards: requests forwarded to the node holding the shard's range",
            shard_forwards.clone(),
        );
        registry.register(
            "shard_forward_failures",
            "Owned shards: forwards that failed (holder unreachable or no longer holding the range)",
            shard_forward_failures.clone(),
        );
        registry.register(
            "strict_leader",
            "Strict namespaces: whether this node leads (1) or not (0)",
            strict_leader.clone(),
        );
        registry.register(
            "strict_leader_known",
            "Strict namespaces: whether this node knows a leader (1) or looks for one (0: requests wait, then answer no_leader)",
            strict_leader_known.clone(),
        );
        registry.register("ids_served", "Ids handed out", ids_served.clone());
        registry.register(
            "log_lines_dropped",
            "Log lines dropped because the log's reader was slow, stalled or gone",
            crate::logs::dropped_counter(),
        );
        registry.register(
            "refills",
            "Block reservations from the authority, by outcome",
            refills.clone(),
        );
        registry.register_with_unit(
            "refill_duration",
            "Time of one block reservation round trip to the authority, successful or not",
            Unit::Seconds,
            refill_seconds.clone(),
        );
        registry.register("errors", "Error responses, by code", errors.clone());
        registry.register(
            "buffer_ids",
            "Ids buffered and not yet handed out",
            buffered.clone(),
        );
        registry.register(
            "ids_burned",
            "Ids abandoned (not handed out, not returned)",
            burned.clone(),
        );
        registry.register(
            "ids_reserved",
            "Ids reserved from the authority in this process's life; at rest equal to \
             served + buffered + burned + given back",
            reserved.clone(),
        );
        registry.register(
            "ids_given_back",
            "Ids handed back to the authority (unused tails at a clean shutdown)",
            given_back.clone(),
        );
        registry.register(
            "demand_ids_per_second",
            "Average demand the buffer is sized for",
            demand.clone(),
        );
        registry.register_with_unit(
            "clock_behind",
            "How far the wall clock is behind a snowflake generator's monotonic time",
            Unit::Seconds,
            clock_behind.clone(),
        );
        registry.register(
            "refill_waits",
            "Requests the buffer could not serve at once, which waited for a block from the authority",
            refill_waits.clone(),
        );
        registry.register(
            "source_requests_in_flight_peak",
            "The most reservations from the authority or the tier above ever in flight at once for the namespace (1: no stampede)",
            source_requests_peak.clone(),
        );
        registry.register(
            "block_requests_in_flight_peak",
            "The most block requests of a lower tier ever answered at once for the namespace",
            block_requests_peak.clone(),
        );
        registry.register(
            "authority_member_up",
            "Whether a multi authority's member answered its latest operation (1) or not (0)",
            member_up.clone(),
        );
        registry.register(
            "sequence_used_ratio",
            "Ids of the sequence namespace below its watermark, as a fraction of all it can hold",
            sequence_used_ratio.clone(),
        );
        registry.register_with_unit(
            "sequence_time_to_exhaustion",
            "Seconds until the sequence namespace runs out at the rate it served over the last hour (divided by at least an hour; +Inf without demand)",
            Unit::Seconds,
            sequence_time_to_exhaustion.clone(),
        );
        registry.register(
            "authority_up",
            "Whether the authority (or a member of a multi authority) answered the latest readiness probe (1) or not (0)",
            authority_up.clone(),
        );
        registry.register(
            "ready",
            "Whether the latest readiness probe found every declared namespace able to serve (1) or not (0)",
            ready.clone(),
        );
        registry.register(
            "grpc_requests",
            "gRPC requests answered, by method and status code",
            grpc_requests.clone(),
        );
        registry.register(
            "resp_commands",
            "RESP commands answered, by command and outcome (ok, or error for an error reply)",
            resp_commands.clone(),
        );
        registry.register(
            "auth_ids",
            "Ids handed out per bearer token (by name, or the first 12 hex digits of its hash)",
            auth_ids.clone(),
        );
        registry.register(
            "auth_refused",
            "Requests refused for want of a known token, a scope, or quota, per token and reason",
            auth_refused.clone(),
        );
        registry.register_with_unit(
            "snowflake_time_to_exhaustion",
            "Time until a snowflake namespace's layout runs out of timestamp bits (no id after)",
            Unit::Seconds,
            snowflake_time_left.clone(),
        );
        registry.register(
            "snowflake_workers_held",
            "Worker ids of a snowflake namespace's lease group with a live lease, by the \
             authority's clock",
            snowflake_workers_held.clone(),
        );
        registry.register(
            "snowflake_workers_possible",
            "Worker ids a snowflake namespace's layout allows (2^node_bits)",
            snowflake_workers_possible.clone(),
        );
        registry.register(
            "snowflake_worker_pool_used_ratio",
            "Share of a snowflake namespace's worker ids with a live lease; at 1 no further \
             node of the group can start",
            snowflake_worker_pool_used.clone(),
        );
        registry.register(
            "snowflake_sequence_limit_per_unit",
            "Ids one snowflake worker may issue per time unit (2^sequence_bits)",
            snowflake_sequence_limit.clone(),
        );
        registry.register(
            "snowflake_sequence_peak_per_unit",
            "Most ids the worker issued in one time unit over the last one to two minutes",
            snowflake_sequence_peak.clone(),
        );
        registry.register(
            "snowflake_sequence_peak_ratio",
            "Peak ids per time unit over the per-unit limit; at 1 requests waited for the next \
             unit",
            snowflake_sequence_peak_used.clone(),
        );
        registry.register(
            "snowflake_sequence_exhausted",
            "Requests that found their time unit's sequence used up and waited for the next unit",
            snowflake_sequence_exhausted.clone(),
        );
        registry.register(
            "snowflake_lease_held",
            "Whether the namespace's worker lease is held (1) or lost (0): a lost lease issues nothing",
            snowflake_lease_held.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "The idmint version this node runs (always 1)",
            build_info.clone(),
        );
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        Metrics {
            registry: root,
            ids_served,
            refills,
            refill_seconds,
            errors,
            buffered,
            burned,
            reserved,
            given_back,
            demand,
            clock_behind,
            refill_waits,
            source_requests_peak,
            block_requests_peak,
            member_up,
            sequence_used_ratio,
            sequence_time_to_exhaustion,
            authority_up,
            ready,
            grpc_requests,
            resp_commands,
            auth_ids,
            auth_refused,
            snowflake_time_left,
            snowflake_workers_held,
            snowflake_workers_possible,
            snowflake_worker_pool_used,
            snowflake_sequence_limit,
            snowflake_sequence_peak,
            snowflake_sequence_peak_used,
            snowflake_sequence_exhausted,
            snowflake_lease_held,
            strict_leader,
            strict_leader_known,
            shard_ranges_held,
            shard_forwards,
            shard_forward_failures,
        }
    }

    /// Sets the exhaustion gauges of the snowflake namespace `namespace` from its API state
    /// (as [`crate::namespace::Namespace::info_live`] reports it): the time left from
    /// `seconds_to_exhaustion`, the pool's series only while the authority reported it (removed
    /// otherwise, so no stale value is scraped), the sequence's from its headroom.
    pub fn refresh_snowflake(&self, namespace: &str, state: &idmint_api::SnowflakeState) {
        let labels = NamespaceLabels {
            namespace: namespace.to_owned(),
        };
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        // One statement per series: `get_or_create` holds the family's lock while its guard lives.
        self.snowflake_time_left
            .get_or_create(&labels)
            .set(state.seconds_to_exhaustion as f64);
        match &state.worker_pool {
            Some(idmint_api::WorkerPool {
                possible,
                held: Some(held),
                ..
            }) => {
                self.snowflake_workers_held
                    .get_or_create(&labels)
                    .set(gauge(*held));
                self.snowflake_workers_possible
                    .get_or_create(&labels)
                    .set(gauge(*possible));
                self.snowflake_worker_pool_used
                    .get_or_create(&labels)
                    .set(*held as f64 / (*possible).max(1) as f64);
            }
            _ => {
                self.snowflake_workers_held.remove(&labels);
                self.snowflake_workers_possible.remove(&labels);
                self.snowflake_worker_pool_used.remove(&labels);
            }
        }
        match &state.worker_lease {
            Some(lease) => {
                self.snowflake_lease_held
                    .get_or_create(&labels)
                    .set(i64::from(lease.status != idmint_api::LeaseStatus::Lost));
            }
            None => {
                self.snowflake_lease_held.remove(&labels);
            }
        }
        if let Some(h) = &state.sequence_headroom {
            self.snowflake_sequence_limit
                .get_or_create(&labels)
                .set(gauge(h.limit_per_unit));
            self.snowflake_sequence_peak
                .get_or_create(&labels)
                .set(gauge(h.peak_per_unit));
            self.snowflake_sequence_peak_used
                .get_or_create(&labels)
                .set(h.peak_fraction);
        }
    }

    /// Sets `idmint_authority_member_up` from the members' health as last seen.
    pub fn refresh_members(&self, members: &[idmint_store::MemberHealth]) {
        for m in members {
            let labels = MemberLabels {
                member: m.number.to_string(),
                kind: m.kind.to_owned(),
                offset: m.offset.to_string(),
            };
            self.member_up.get_or_create(&labels).set(i64::from(m.up));
        }
    }

    /// The exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        match format {
            Format::OpenMetrics => out,
            Format::Prometheus => openmetrics_to_prometheus(&out),
        }
    }
}

/// A text exposition format of `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4: the default.
    Prometheus,
    /// OpenMetrics 1.0.0 text, only to a client that asks for it.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format to answer a request with this `Accept` header (`None`: no header).
    ///
    /// OpenMetrics only when `application/openmetrics-text` (without a version, or version
    /// 1.0.0) is accepted with a quality at least that of every acceptable 0.0.4 range
    /// (`text/plain` without a version or with 0.0.4, `text/*`, `*/*`); everything else,
    /// including a missing, unparsable or unsatisfiable header, gets the 0.0.4 text, which every
    /// Prometheus scraper reads. Prometheus 2.x and 3.x ask for OpenMetrics first, so they get it.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut openmetrics, mut prometheus) = (0.0_f64, 0.0_f64);
        for range in accept.unwrap_or("").split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let (mut q, mut version) = (1.0_f64, None);
            for param in parts {
                let Some((key, value)) = param.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse().unwrap_or(0.0),
                    "version" => version = Some(value.to_owned()),
                    _ => {}
                }
            }
            if q.is_nan() || q <= 0.0 {
                continue;
            }
            let version = version.as_deref();
            match media.as_str() {
                "application/openmetrics-text" if matches!(version, None | Some("1.0.0")) => {
                    openmetrics = openmetrics.max(q);
                }
                "text/plain" if matches!(version, None | Some("0.0.4")) => {
                    prometheus = prometheus.max(q);
                }
                "text/*" | "*/*" => prometheus = prometheus.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= prometheus {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics text exposition as prometheus-client
/// writes it (HELP, TYPE, optional UNIT, then the samples of each family; `# EOF` last).
///
/// What differs: a counter family `x` is `# HELP x_total` / `# TYPE x_total counter` in 0.0.4
/// (its samples are already `x_total`), and its `x_created` samples are dropped; an info family
/// `x` becomes the gauge `x_info`; `# UNIT` and `# EOF` lines and exemplars do not exist in
/// 0.0.4; the other OpenMetrics-only types (`stateset`, `gaugehistogram`, `unknown`) become
/// `untyped` (none of these is registered today).
/// Help text, label and value syntax are the same in both formats for what is written here.
pub fn openmetrics_to_prometheus(openmetrics: &str) -> String {
    // The families whose samples carry a suffix, which 0.0.4 puts in the family's name.
    let suffixes: std::collections::HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| match l.split_once(' ') {
            Some((name, "counter")) => Some((name, "_total")),
            Some((name, "info")) => Some((name, "_info")),
            _ => None,
        })
        .collect();
    let suffix = |name: &str| suffixes.get(name).copied().unwrap_or("");
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!("# HELP {name}{} {help}\n", suffix(name)));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                "info" => "gauge",
                _ => "untyped",
            };
            out.push_str(&format!("# TYPE {name}{} {kind}\n", suffix(name)));
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF`: OpenMetrics only.
        } else if !line.is_empty() {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let created = line[..name_end]
                .strip_suffix("_created")
                .is_some_and(|family| suffix(family) == "_total");
            if created {
                continue;
            }
            // An exemplar follows the value after ` # ` (label values here never hold `#`).
            let sample = line.split_once(" # ").map_or(line, |(sample, _)| sample);
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// One sequence namespace's series, looked up once so the request path pays one atomic
/// increment per answer. The namespace's `crate::supply::Supply` reports to it.
#[derive(Debug, Clone)]
pub struct SupplyMetrics {
    served: Counter,
    refill_ok: Counter,
    refill_error: Counter,
    refill_seconds: Histogram,
    waits: Counter,
}

impl SupplyMetrics {
    /// The series of `namespace` in `metrics`.
    pub fn new(metrics: &Metrics, namespace: &str) -> Self {
        let labels = NamespaceLabels {
            namespace: namespace.to_owned(),
        };
        let outcome = |outcome| RefillLabels {
            namespace: namespace.to_owned(),
            outcome,
        };
        // One statement per series: `get_or_create` returns a guard of the family's lock, and
        // a second call on the same family while the first guard lives (as temporaries of one
        // struct expression would) deadlocks.
        let served = metrics.ids_served.get_or_create(&labels).clone();
        let refill_ok = metrics.refills.get_or_create(&outcome("ok")).clone();
        let refill_error = metrics.refills.get_or_create(&outcome("error")).clone();
        let refill_seconds = metrics.refill_seconds.get_or_create(&labels).clone();
        let waits = metrics.refill_waits.get_or_create(&labels).clone();
        SupplyMetrics {
            served,
            refill_ok,
            refill_error,
            refill_seconds,
            waits,
        }
    }
}

impl crate::supply::SupplyEvents for SupplyMetrics {
    fn served(&self, ids: u64) {
        self.served.inc_by(ids);
    }
    fn refilled(&self, ok: bool, took: std::time::Duration) {
        if ok {
            &self.refill_ok
        } else {
            &self.refill_error
        }
        .inc();
        self.refill_seconds.observe(took.as_secs_f64());
    }
    fn waited(&self) {
        self.waits.inc();
    }
}

mod process;

#[cfg(test)]
mod tests;
