// Routing by the shard map. Without a node: map -> node, key -> shard, ranges nobody configured
// holds, when the map is fetched, used and refreshed. Live: three nodes sharing one PostgreSQL
// authority and the shard-owned namespace `photos` (the `owned` topology: 64 shards in ranges
// of 8; PostgreSQL unreachable fails the test). The ranges are spread first (range r asked for
// through node r % 3 alone, which takes its lease); a client of the first node only then has
// most requests forwarded, a client of all three none once it learned the map. Every id
// decodes to the shard asked for (or its key's).

import { test } from "node:test";
import assert from "node:assert/strict";
import * as idmint from "@idmint/client";
import { Topology, loadScenarios } from "./harness.mjs";

const { ShardRoutes, ShardMapEntry, shardMapOf } = idmint;
const A = "http://10.0.0.1:7879";
const B = "http://10.0.0.2:7879";
const C = "http://10.0.0.3:7879";

function shardMap(thisNode, ranges, error = null) {
  return {
    logical_shards: 64,
    shard_range: 8,
    this_node: thisNode,
    error,
    ranges: ranges.map(([range, holder]) => ({ range, first_shard: range * 8, last_shard: range * 8 + 7, holder })),
  };
}

const nodeOf = (routes, route) => routes.choose(route)?.node;

test("a range goes to the configured node whose advertise url holds it", () => {
  const ranges = [[0, A], [1, B], [2, C], [7, B]];
  // Configured in another order than the urls: node 0 is C, 1 is A, 2 is B.
  const routes = ShardRoutes.fromAnswers([[0, shardMap(C, ranges)], [1, shardMap(A, ranges)], [2, shardMap(B, ranges)]]);
  assert.deepEqual([0, 7, 8, 23, 63].map((s) => nodeOf(routes, { shard: String(s) })), [1, 1, 2, 0, 2]);
  assert.deepEqual(routes.choose({ shard: "17" }), { node: 0, range: 2n });
});

test("a key goes to its shard modulo the logical shards", () => {
  const ranges = [[0, A], [5, B]];
  const routes = ShardRoutes.fromAnswers([[0, shardMap(A, ranges)], [1, shardMap(B, ranges)]]);
  assert.equal(routes.shardOf({ key: String(64n * 1000n + 3n) }), 3n);
  assert.equal(routes.shardOf({ key: String((1n << 64n) - 1n) }), ((1n << 64n) - 1n) % 64n);
  assert.equal(nodeOf(routes, { key: "66" }), 0);
  assert.equal(nodeOf(routes, { key: "41" }), 1);
  assert.equal(nodeOf(routes, { shard: "41" }), 1);
});

test("no holder known means the usual order", () => {
  const ranges = [[0, A], [1, "http://10.9.9.9:7879"]];
  let routes = ShardRoutes.fromAnswers([[0, shardMap(A, ranges)]]);
  assert.equal(nodeOf(routes, { shard: "3" }), 0);
  for (const s of ["8", "16", "64"]) assert.equal(nodeOf(routes, { shard: s }), undefined);
  // The ranges come from any answer; an answer without a url places no range.
  routes = ShardRoutes.fromAnswers([[0, shardMap("", ranges)], [1, shardMap(A, [])]]);
  assert.equal(nodeOf(routes, { shard: "3" }), 1);
  assert.equal(ShardRoutes.fromAnswers([]), undefined);
});

test("ranges come from an answer that read the authority, from either wire", () => {
  const failed = shardMap(A, [], "the authority did not answer");
  // gRPC's 64-bit fields are decimal text.
  const grpc = { ...shardMap(B, [[0, A], [1, B]]), logical_shards: "64", shard_range: "8", error: "" };
  const routes = ShardRoutes.fromAnswers([[0, failed], [1, grpc]]);
  assert.deepEqual([nodeOf(routes, { shard: "0" }), nodeOf(routes, { shard: "9" })], [0, 1]);
  assert.deepEqual(shardMapOf({ namespace: "photos", kind: "snowflake", state: { shards: failed } }), failed);
  assert.deepEqual(shardMapOf({ namespace: "photos", kind: "snowflake", shards: grpc }), grpc);
  assert.equal(shardMapOf({ namespace: "events", kind: "snowflake", state: { shards: null } }), undefined);
  assert.equal(shardMapOf({ namespace: "events", kind: "snowflake", shards: null }), undefined);
});

test("the map is fetched first, then refreshed once when stale", () => {
  const entry = new ShardMapEntry();
  assert.equal(entry.plan(0, 10_000), "fetch");
  assert.equal(entry.plan(1_000, 10_000), "use"); // that fetch is in flight: the usual order
  entry.fetching = false;
  entry.learnedAt = 2_000;
  assert.equal(entry.plan(11_000, 10_000), "use");
  assert.equal(entry.plan(12_000, 10_000), "refresh");
  assert.equal(entry.plan(13_000, 10_000), "use"); // one refresh in flight, no second
});

test("a not-owned namespace is not asked about again within the period", () => {
  const entry = new ShardMapEntry();
  entry.learnedAt = 5_000;
  assert.equal(entry.plan(14_000, 10_000), "use");
  assert.equal(entry.plan(15_000, 10_000), "refresh");
});

test("a failed holder loses its range and the map is fetched at once", () => {
  const entry = new ShardMapEntry();
  entry.learnedAt = 1_000;
  entry.routes = ShardRoutes.fromAnswers([[0, shardMap(A, [[0, A], [1, B]])], [1, shardMap(B, [])]]);
  entry.forget({ node: 1, range: 1n });
  assert.equal(entry.plan(2_000, 10_000), "refresh");
  assert.equal(nodeOf(entry.routes, { shard: "8" }), undefined);
  assert.equal(nodeOf(entry.routes, { shard: "0" }), 0);
  assert.equal(entry.plan(2_000, 10_000), "use");
});

const SHARDS = 64n;
const PER_RANGE = 8n;
const REQUESTS = 90;
const FORWARDS = 'idmint_shard_forwards_total{namespace="photos"}';

/** A small deterministic generator (xorshift64), so a failing run can be replayed. */
function rng(seed) {
  let x = BigInt.asUintN(64, seed);
  return () => {
    x ^= BigInt.asUintN(64, x << 13n);
    x ^= x >> 7n;
    x ^= BigInt.asUintN(64, x << 17n);
    return x;
  };
}

async function ask(client, seed) {
  const next = rng(seed);
  for (let i = 0; i < REQUESTS; i++) {
    const v = next();
    const route = i % 2 === 0 ? { shard: v % SHARDS } : { key: v };
    const shard = v % SHARDS;
    const count = 1 + Number(next() % 3n);
    const ids = await client.nextBatch("photos", count, route);
    assert.equal(ids.length, count);
    for (const id of ids) assert.equal(idmint.shardOf(id, "instagram"), Number(shard), `${JSON.stringify(String(v))}`);
  }
}

test("a client of several nodes sends each shard to its holder", async () => {
  const t = await Topology.start(loadScenarios().topologies.owned);
  try {
    const urls = t.urls("grpc");
    for (let r = 0n; r < SHARDS / PER_RANGE; r++) {
      const one = new idmint.Client(urls[Number(r % 3n)]);
      await one.next("photos", { shard: r * PER_RANGE });
      await one.close();
    }
    let before = await t.metric(FORWARDS);
    const firstOnly = new idmint.Client(urls[0]);
    await ask(firstOnly, 0x9e3779b97f4a7c15n);
    await firstOnly.close();
    const unrouted = (await t.metric(FORWARDS)) - before;
    assert.ok(unrouted >= REQUESTS / 3, `a client of s1 alone had ${unrouted} of ${REQUESTS} forwarded`);

    for (const transport of ["grpc", "http"]) {
      before = await t.metric(FORWARDS);
      const all = new idmint.Client(t.urls(transport), { transport });
      await ask(all, 0x2545f4914f6cdd1dn);
      await all.close();
      const routed = (await t.metric(FORWARDS)) - before;
      assert.ok(routed <= 2, `${transport}: a client of all three had ${routed} of ${REQUESTS} forwarded (without the map: ${unrouted})`);
    }
  } finally {
    await t.stop();
  }
});
