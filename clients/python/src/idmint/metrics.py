"""Prometheus metrics of a client, opt-in: `pip install idmint[prometheus]`, then
`idmint.metrics.register(client)` (the default registry) or `register(client, registry)`.

Each scrape reads `client.all_stats()`: one sample per namespace the client has set up,
labelled `namespace` and `kind`. Gauge `idmint_client_buffered_ids` (ids held, not handed out
yet); counters `idmint_client_served_ids_total`, `idmint_client_refills_total`,
`idmint_client_refill_failures_total`, `idmint_client_given_back_ids_total`,
`idmint_client_burned_ids_total` (never handed out and never to be), `idmint_client_expired_ids_total`
(time-ordered ids dropped as stale) and `idmint_client_waits_total` (takes that found the
cache empty). One client per registry: a second one's metrics would clash with the first's
names, and the registry refuses it (`ValueError`); give each client its own registry.
"""

from __future__ import annotations

from typing import Iterable, Optional, Protocol

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("idmint.metrics needs prometheus_client: pip install 'idmint[prometheus]'") from e

from .sequence import Stats

__all__ = ["ClientCollector", "register"]

_LABELS = ["namespace", "kind"]
#: (name, help, the Stats field) of each counter.
_COUNTERS = (
    ("idmint_client_served_ids", "Ids the client handed out.", "served"),
    ("idmint_client_refills", "Blocks (sequence) or batches (time-ordered) fetched from nodes.",
     "refills"),
    ("idmint_client_refill_failures", "Refills that failed.", "refill_failures"),
    ("idmint_client_given_back_ids", "Unused ids handed back to the nodes on close.",
     "given_back"),
    ("idmint_client_burned_ids", "Ids never handed out and never to be.", "burned"),
    ("idmint_client_expired_ids", "Time-ordered ids dropped as older than the validity window.",
     "expired"),
    ("idmint_client_waits", "Takes that found the cache empty and waited.", "waits"),
)


class _HasStats(Protocol):
    def all_stats(self) -> dict[str, Stats]: ...


class ClientCollector(Collector):
    """The collector `register` adds: a view of one client's `all_stats()` at each scrape."""

    def __init__(self, client: _HasStats) -> None:
        self._client = client

    def _families(self, stats: dict[str, Stats]) -> list[Metric]:
        buffered = GaugeMetricFamily("idmint_client_buffered_ids",
                                     "Ids held by the client, not handed out yet.",
                                     labels=_LABELS)
        counters = [CounterMetricFamily(name, text, labels=_LABELS) for name, text, _ in _COUNTERS]
        for namespace, s in sorted(stats.items()):
            labels = [namespace, s.kind]
            buffered.add_metric(labels, s.buffered)
            for family, (_, _, field) in zip(counters, _COUNTERS):
                family.add_metric(labels, getattr(s, field))
        return [buffered, *counters]

    def collect(self) -> Iterable[Metric]:
        return self._families(self._client.all_stats())

    def describe(self) -> Iterable[Metric]:
        return self._families({})


def register(client: _HasStats,
             registry: Optional[CollectorRegistry] = None) -> ClientCollector:
    """Adds `client`'s metrics to `registry` (default: prometheus_client's global one) and
    returns the collector (`registry.unregister(collector)` removes them)."""
    collector = ClientCollector(client)
    (REGISTRY if registry is None else registry).register(collector)
    return collector
