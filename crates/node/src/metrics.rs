//! Prometheus metrics of a node, exposed as text at `/metrics`.
//!
//! Counters are updated on the request and refill paths; gauges that mirror buffer state
//! (buffered ids, demand, burned ids) are refreshed from the namespaces at scrape time, so the
//! hot path pays only for an atomic increment.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
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

/// Labels of errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The API error code.
    pub code: &'static str,
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
    /// Demand average, ids per second.
    pub demand: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
    /// Wall clock behind a snowflake generator's time, seconds.
    pub clock_behind: Family<NamespaceLabels, Gauge<f64, AtomicU64>>,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    ])
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("idmint");
        let ids_served = Family::<NamespaceLabels, Counter>::default();
        let refills = Family::<RefillLabels, Counter>::default();
        let refill_seconds = Family::<NamespaceLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        let buffered = Family::<NamespaceLabels, Gauge>::default();
        let burned = Family::<NamespaceLabels, Gauge>::default();
        let demand = Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        let clock_behind = Family::<NamespaceLabels, Gauge<f64, AtomicU64>>::default();
        registry.register("ids_served", "Ids handed out", ids_served.clone());
        registry.register(
            "refills",
            "Block reservations from the authority, by outcome",
            refills.clone(),
        );
        registry.register(
            "refill_duration_seconds",
            "Time of one reservation round trip",
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
            "demand_ids_per_second",
            "Average demand the buffer is sized for",
            demand.clone(),
        );
        registry.register(
            "clock_behind_seconds",
            "How far the wall clock is behind a snowflake generator's monotonic time",
            clock_behind.clone(),
        );
        Metrics {
            registry,
            ids_served,
            refills,
            refill_seconds,
            errors,
            buffered,
            burned,
            demand,
            clock_behind,
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// One sequence namespace's series, looked up once so the request path pays one atomic
/// increment per answer. The namespace's [`crate::supply::Supply`] reports to it.
#[derive(Debug, Clone)]
pub struct SupplyMetrics {
    served: Counter,
    refill_ok: Counter,
    refill_error: Counter,
    refill_seconds: Histogram,
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
        SupplyMetrics {
            served,
            refill_ok,
            refill_error,
            refill_seconds,
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
}
