//! A scrape of `/metrics`: every gauge that mirrors state is refreshed, then the families are
//! encoded. Counters move on the request and refill paths; what is read here is read at scrape
//! time only, so the hot path pays for nothing more than an atomic increment.
//!
//! Invariants: a scrape is a read. It probes readiness (the authority's `list`, bounded), reads
//! each snowflake group's leases (bounded by [`crate::namespace::POOL_READ_TIMEOUT`]) and the
//! members' recorded health; it never sets up, reserves or renews anything.

use super::Node;
use crate::metrics::{Format, NamespaceLabels};
use crate::namespace::Namespace;

impl Node {
    /// Everything `/metrics` shows, refreshed and encoded in `format`.
    pub async fn scrape(&self, format: Format) -> String {
        self.refresh_sequence_gauges();
        // Sets `idmint_authority_up` and `idmint_ready` as the load balancer would see them; a
        // node shutting down has nothing more to say there.
        let _ = self.readiness().await;
        self.metrics.refresh_members(
            &self
                .authority
                .members()
                .map_or_else(Vec::new, |m| m.health()),
        );
        let now = self.now();
        for ns in self.all() {
            if let Some(shards) = ns.owned_shards() {
                let labels = NamespaceLabels {
                    namespace: ns.name().to_string(),
                };
                self.metrics
                    .shard_ranges_held
                    .get_or_create(&labels)
                    .set(i64::try_from(shards.held().len()).unwrap_or(i64::MAX));
            }
            if let Namespace::Snowflake(_) = &*ns {
                if let idmint_api::NamespaceInfo::Snowflake { state, .. } =
                    ns.info_live(now, &*self.authority).await
                {
                    self.metrics.refresh_snowflake(ns.name().as_str(), &state);
                }
            }
        }
        self.metrics.encode(format)
    }

    /// The sequence gauges, mirrored from each namespace's supply.
    fn refresh_sequence_gauges(&self) {
        for ns in self.all() {
            if let Namespace::Sequence(s) = &*ns {
                let labels = NamespaceLabels {
                    namespace: ns.name().to_string(),
                };
                let snap = s.supply().snapshot();
                let (buffered, burned, demand) =
                    (snap.buffered, snap.stats.burned, snap.demand_per_sec);
                self.metrics
                    .buffered
                    .get_or_create(&labels)
                    .set(i64::try_from(buffered).unwrap_or(i64::MAX));
                self.metrics
                    .burned
                    .get_or_create(&labels)
                    .set(i64::try_from(burned).unwrap_or(i64::MAX));
                self.metrics.demand.get_or_create(&labels).set(demand);
                let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                self.metrics
                    .reserved
                    .get_or_create(&labels)
                    .set(gauge(snap.reserved));
                self.metrics
                    .given_back
                    .get_or_create(&labels)
                    .set(gauge(snap.stats.given_back));
                self.metrics
                    .source_requests_peak
                    .get_or_create(&labels)
                    .set(gauge(snap.source_requests_peak));
                self.metrics
                    .block_requests_peak
                    .get_or_create(&labels)
                    .set(gauge(snap.block_requests_peak));
                if let Some(strict) = s.strict_order() {
                    let (leads, known) = match strict.role() {
                        crate::strict::Role::Leader(_) => (1, 1),
                        crate::strict::Role::Follower { .. } => (0, 1),
                        crate::strict::Role::Seeking(_) => (0, 0),
                    };
                    self.metrics.strict_leader.get_or_create(&labels).set(leads);
                    self.metrics
                        .strict_leader_known
                        .get_or_create(&labels)
                        .set(known);
                }
                let spec = s.spec();
                let capacity = spec.capacity();
                let used = spec.ids_between(spec.first(), snap.watermark);
                self.metrics
                    .sequence_used_ratio
                    .get_or_create(&labels)
                    .set(if capacity == 0 {
                        1.0
                    } else {
                        used as f64 / capacity as f64
                    });
                // No demand over the last hour: never (+Inf), so a "runs out within N days"
                // alert stays quiet.
                self.metrics
                    .sequence_time_to_exhaustion
                    .get_or_create(&labels)
                    .set(
                        s.time_to_exhaustion()
                            .map_or(f64::INFINITY, |(left, _)| left.as_secs_f64()),
                    );
            }
        }
    }
}
