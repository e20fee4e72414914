//! `@idmint/client/metrics`: a Prometheus view of a client's counters with `prom-client` (an
//! optional peer dependency: install it to use this entry point; the main entry never loads it).
//!
//! `registerMetrics(client, registry)` adds, to `registry` (default: prom-client's global one),
//! metrics read from `client.allStats()` at each scrape, one sample per namespace the client has
//! set up, labelled `namespace` and `kind`: the gauge `idmint_client_buffered_ids` (ids held, not
//! handed out yet) and the counters `idmint_client_served_ids_total`,
//! `idmint_client_refills_total`, `idmint_client_refill_failures_total`,
//! `idmint_client_given_back_ids_total`, `idmint_client_burned_ids_total` (never handed out and
//! never to be), `idmint_client_expired_ids_total` (time-ordered ids dropped as stale) and
//! `idmint_client_waits_total` (takes that found the cache empty). One client per registry: a
//! second's names clash with the first's, and prom-client refuses them.

import { Counter, Gauge, register as globalRegistry, type Registry } from "prom-client";
import type { Client } from "./client.js";
import type { NamespaceStats } from "./namespace.js";

type Label = "namespace" | "kind";
const LABELS: readonly Label[] = ["namespace", "kind"];

/** The counters: metric name, help, and the `NamespaceStats` field. */
const COUNTERS: readonly [string, string, keyof NamespaceStats][] = [
  ["idmint_client_served_ids_total", "Ids the client handed out.", "served"],
  ["idmint_client_refills_total", "Blocks (sequence) or batches (time-ordered) fetched from nodes.", "refills"],
  ["idmint_client_refill_failures_total", "Refills that failed.", "refillFailures"],
  ["idmint_client_given_back_ids_total", "Unused ids handed back to the nodes on close.", "givenBack"],
  ["idmint_client_burned_ids_total", "Ids never handed out and never to be.", "burned"],
  ["idmint_client_expired_ids_total", "Time-ordered ids dropped as older than the validity window.", "expired"],
  ["idmint_client_waits_total", "Takes that found the cache empty and waited.", "waits"],
];

/** What `registerMetrics` reads: any object with `allStats()` (a `Client`). */
export type StatsSource = Pick<Client, "allStats">;

/** The metrics `registerMetrics` made, to remove with `registry.removeSingleMetric(name)` for each. */
export interface ClientMetrics {
  names: string[];
}

/**
 * Adds `client`'s metrics to `registry` (default: prom-client's global `register`); each
 * scrape reads `client.allStats()`. Throws if the registry holds these names already.
 */
export function registerMetrics(client: StatsSource, registry: Registry = globalRegistry): ClientMetrics {
  const taken = COUNTERS.map(([name]) => name).concat("idmint_client_buffered_ids").filter((n) => registry.getSingleMetric(n) !== undefined);
  if (taken.length > 0) throw new Error(`registerMetrics: the registry holds ${taken.join(", ")} already (one client per registry)`);
  const labelsOf = (name: string, s: NamespaceStats) => ({ namespace: name, kind: s.kind });
  new Gauge<Label>({
    name: "idmint_client_buffered_ids",
    help: "Ids held by the client, not handed out yet.",
    labelNames: LABELS,
    registers: [registry],
    collect() {
      this.reset();
      for (const [name, s] of client.allStats()) this.set(labelsOf(name, s), s.buffered);
    },
  });
  for (const [metric, help, field] of COUNTERS) {
    new Counter<Label>({
      name: metric,
      help,
      labelNames: LABELS,
      registers: [registry],
      collect() {
        this.reset();
        for (const [name, s] of client.allStats()) this.inc(labelsOf(name, s), s[field] as number);
      },
    });
  }
  return { names: ["idmint_client_buffered_ids", ...COUNTERS.map(([name]) => name)] };
}
