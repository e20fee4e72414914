//! Which node to send a shard's request to first: the shard map of each shard-owned namespace
//! (`state.shards` over HTTP, `SnowflakeInfo.shards` over gRPC; docs/api.md), learned from the
//! nodes and cached, so a request goes to the node holding its shard's range and is served
//! there without a forward.
//!
//! Invariants:
//! - The map only picks the node tried first; the nodes' usual failover follows, so a wrong or
//!   missing map costs a forward, never an answer.
//! - Learning a map asks every configured node for the namespace's info at once: each answer's
//!   `this_node` says which configured node has which advertise url, the ranges come from any
//!   answer. A holder that is not a configured node, or a range nobody holds, has no node: the
//!   usual order. A failed or partial fetch never fails a request.
//! - One entry per namespace; a namespace that is not shard-owned (or unknown) is remembered
//!   as such for the refresh period, and not asked about again meanwhile.
//! - The first routed request of a namespace waits for the fetch; a map older than the refresh
//!   period is refreshed in the background by the next routed request, at most one fetch per
//!   namespace in flight. A chosen node that failed (no answer, `no_leader`) loses its range
//!   until the next fetch, which is due at once.

import type { NamespaceInfo, Transport } from "./transport.js";
import type { RouteFields } from "./shard.js";

/** Milliseconds a map is used before the next routed request refreshes it. */
export const SHARD_MAP_REFRESH_MS = 10_000;

/** The node a routed request goes to first, and the range that chose it. */
export interface Choice {
  node: number;
  range: bigint;
}

/** One node's shard map, as either wire carries it (numbers, bigints or decimal text). */
export interface WireShardMap {
  logical_shards?: unknown;
  shard_range?: unknown;
  this_node?: unknown;
  ranges?: unknown;
  error?: unknown;
}

function u64(v: unknown): bigint {
  if (typeof v === "bigint") return v;
  if ((typeof v === "number" && Number.isSafeInteger(v)) || (typeof v === "string" && /^\d+$/.test(v))) return BigInt(v);
  return -1n;
}

/** A namespace's shards and the configured node (by index) holding each range. */
export class Routes {
  constructor(
    readonly logicalShards: bigint,
    readonly shardRange: bigint,
    /** Range (decimal text) → configured node index. */
    readonly holders: ReadonlyMap<string, number>,
  ) {}

  /**
   * The routes of the maps the configured nodes answered (`[node index, map]`): node `i` holds
   * the ranges whose holder is its `this_node`; the ranges are the first answer's that read the
   * authority (else the first's). `undefined` without an answer, or with shard counts no node
   * could serve.
   */
  static fromAnswers(answers: readonly (readonly [number, WireShardMap])[]): Routes | undefined {
    const base = (answers.find(([, m]) => !m.error) ?? answers[0])?.[1];
    if (base === undefined) return undefined;
    const logical = u64(base.logical_shards);
    const perRange = u64(base.shard_range);
    if (logical <= 0n || perRange <= 0n) return undefined;
    const byUrl = new Map<string, number>();
    for (const [node, m] of answers) {
      if (typeof m.this_node === "string" && m.this_node !== "" && !byUrl.has(m.this_node)) byUrl.set(m.this_node, node);
    }
    const holders = new Map<string, number>();
    for (const r of Array.isArray(base.ranges) ? (base.ranges as { range?: unknown; holder?: unknown }[]) : []) {
      const node = typeof r.holder === "string" ? byUrl.get(r.holder) : undefined;
      const range = u64(r.range);
      if (node !== undefined && range >= 0n) holders.set(range.toString(), node);
    }
    return new Routes(logical, perRange, holders);
  }

  /** The shard `route` names: its own, or its key's (`key % logical_shards`). */
  shardOf(route: RouteFields): bigint {
    return "shard" in route ? BigInt(route.shard) : BigInt(route.key) % this.logicalShards;
  }

  /** The configured node holding `route`'s range, if one does (none for a shard out of range). */
  choose(route: RouteFields): Choice | undefined {
    const shard = this.shardOf(route);
    if (shard >= this.logicalShards) return undefined;
    const range = shard / this.shardRange;
    const node = this.holders.get(range.toString());
    return node === undefined ? undefined : { node, range };
  }

  /** These routes without `range`'s holder. */
  without(range: bigint): Routes {
    const holders = new Map(this.holders);
    holders.delete(range.toString());
    return new Routes(this.logicalShards, this.shardRange, holders);
  }
}

/** The shard map of a node's answer: HTTP `state.shards` or gRPC `shards`; absent when not owned. */
export function shardMapOf(info: NamespaceInfo): WireShardMap | undefined {
  const state = info.state;
  const found = typeof state === "object" && state !== null ? (state as { shards?: unknown }).shards : info.shards;
  return typeof found === "object" && found !== null ? (found as WireShardMap) : undefined;
}

/** What a routed request does about the map. */
export type Plan = "use" | "fetch" | "refresh";

/** What is known of one namespace. */
export class Entry {
  /** When the latest fetch ended (the client's clock, ms); undefined before one did. */
  learnedAt: number | undefined;
  routes: Routes | undefined;
  fetching = false;
  /** A chosen node failed since the latest fetch: the next routed request fetches again. */
  due = false;

  /** `use` the routes, `fetch` (and wait), or `refresh` (using the routes meanwhile); marks a fetch in flight when it starts one. */
  plan(now: number, refreshMs: number): Plan {
    if (this.fetching) return "use";
    if (this.learnedAt === undefined || this.due || now - this.learnedAt >= refreshMs) {
      const first = this.learnedAt === undefined;
      this.fetching = true;
      this.due = false;
      return first ? "fetch" : "refresh";
    }
    return "use";
  }

  /** `choice.node` failed: its range goes by the usual order until the next fetch, due at once. */
  forget(choice: Choice): void {
    if (this.routes?.holders.get(choice.range.toString()) === choice.node) this.routes = this.routes.without(choice.range);
    this.due = true;
  }
}

/** The shard maps of one client's namespaces. */
export class ShardMaps {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly transports: readonly Transport[],
    private readonly timeoutMs: number,
    private readonly refreshMs: number,
    private readonly now: () => number,
  ) {}

  /** The node to try first for `route` of `namespace`, learning or refreshing the map as due; `undefined`: the usual order. */
  async choose(namespace: string, route: RouteFields): Promise<Choice | undefined> {
    if (this.transports.length < 2) return undefined;
    let entry = this.entries.get(namespace);
    if (entry === undefined) {
      entry = new Entry();
      this.entries.set(namespace, entry);
    }
    let routes = entry.routes;
    switch (entry.plan(this.now(), this.refreshMs)) {
      case "fetch":
        routes = await this.fetch(namespace, entry);
        break;
      case "refresh":
        void this.fetch(namespace, entry);
        break;
      case "use":
        break;
    }
    return routes?.choose(route);
  }

  /** `choice.node` failed a request of `namespace` in a way another node may not have. */
  failed(namespace: string, choice: Choice): void {
    this.entries.get(namespace)?.forget(choice);
  }

  /** Asks every node for the map at once; stores what they say, ending the fetch in flight. Never throws. */
  private async fetch(namespace: string, entry: Entry): Promise<Routes | undefined> {
    const answers: [number, WireShardMap][] = [];
    try {
      const infos = await Promise.allSettled(this.transports.map((t) => t.info(namespace, this.timeoutMs)));
      infos.forEach((outcome, node) => {
        const found = outcome.status === "fulfilled" ? shardMapOf(outcome.value) : undefined;
        if (found !== undefined) answers.push([node, found]);
      });
    } finally {
      entry.routes = Routes.fromAnswers(answers);
      entry.learnedAt = this.now();
      entry.fetching = false;
    }
    return entry.routes;
  }
}
