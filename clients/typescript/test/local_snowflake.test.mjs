// Local snowflake ids (`client.localSnowflake`): the generator rules on a manual clock, then
// against a live node: the worker pool shared with the node (no duplicates, distinct workers),
// release with a floor above the last id, the layout lock, HTTP-only clients refused.

import { test } from "node:test";
import assert from "node:assert/strict";
import * as idmint from "@idmint/client";
import { Topology, loadScenarios } from "./harness.mjs";

const MS = 1_000_000n;
const START_MS = 1_800_000_000_000n;
const TTL = 10_000n * MS;
const MARGIN = 2_000n * MS;
const twitter = idmint.Layout.preset("twitter");

function manualClock(wallMs) {
  const c = { wall: wallMs * MS, mono: 0n };
  return {
    wallNs: () => c.wall,
    monotonicNs: () => c.mono,
    advanceMs(ms) {
      c.wall += BigInt(ms) * MS;
      c.mono += BigInt(ms) * MS;
    },
    stepWallMs(ms) {
      c.wall += BigInt(ms) * MS;
    },
  };
}

const tsMs = (id) => twitter.decode(id).unixNanos / MS;

test("rules: nothing before a renewal, nothing at the floor or past the lease less its margin", () => {
  const clock = manualClock(START_MS);
  const g = new idmint.SnowflakeGenerator(twitter, 3, 0n, clock);
  assert.throws(() => g.next(), idmint.LeaseExpiredError);
  g.renewed(g.nowNs(), START_MS + 3_000n, TTL, MARGIN);
  const first = g.next();
  assert.equal(twitter.decode(first).node, 3);
  clock.advanceMs(2_999);
  assert.ok(tsMs(g.next()) < START_MS + 3_000n);
  clock.advanceMs(1);
  assert.throws(() => g.next(), idmint.LeaseExpiredError);
  g.renewed(g.nowNs(), START_MS + 60_000n, TTL, MARGIN);
  const again = g.next();
  clock.advanceMs(7_999);
  assert.ok(g.next() > again);
  clock.advanceMs(1);
  assert.throws(() => g.next(), idmint.LeaseExpiredError);
});

test("rules: a wall clock stepped back 30 s moves nothing back, also across generators", () => {
  const clock = manualClock(START_MS);
  const g = new idmint.SnowflakeGenerator(twitter, 3, START_MS - 100n, clock);
  g.renewed(g.nowNs(), START_MS + 5_000n, TTL, MARGIN);
  const before = g.next();
  clock.stepWallMs(-30_000);
  const after = g.next();
  assert.ok(after > before);
  const own = g.issuedBelowMs();
  assert.ok(own > tsMs(after));
  const next = new idmint.SnowflakeGenerator(twitter, 4, 0n, clock, own);
  clock.advanceMs(40_000);
  next.renewed(next.nowNs(), 1n << 50n, TTL, MARGIN);
  assert.ok(tsMs(next.next()) >= own);
  g.stop();
  assert.throws(() => g.next(), idmint.LeaseExpiredError);
});

test("rules: the layout lock's text is the Rust core's", () => {
  assert.equal(
    idmint.lockText(twitter),
    "timestamp_bits=41 node_bits=10 sequence_bits=12 time_unit_ns=1000000 epoch_unix_ms=1288834974657 order=node_then_sequence max_bits=63",
  );
  assert.match(idmint.lockText(idmint.Layout.preset("sonyflake")), /order=sequence_then_node/);
});

const suite = loadScenarios();

async function withNode(body) {
  const t = await Topology.start(suite.topologies.single);
  try {
    await body(t);
  } finally {
    await t.stop();
  }
}

test("local ids share the pool with the node and never collide; close releases above the last id", () =>
  withNode(async (t) => {
    const client = new idmint.Client(t.urls("grpc"));
    try {
      const nodeIds = await client.nextBatch("flake", 1000);
      const nodeWorker = twitter.decode(nodeIds[0]).node;
      const a = await client.localSnowflake("flake");
      const b = await client.localSnowflake("flake");
      assert.equal(new Set([a.worker, b.worker, nodeWorker]).size, 3);
      const seen = new Set(nodeIds);
      for (const h of [a, b]) {
        let last = 0n;
        for (let i = 0; i < 50_000; i++) {
          const id = h.next();
          assert.ok(id > last);
          last = id;
          assert.ok(!seen.has(id), `duplicate ${id}`);
          seen.add(id);
        }
        assert.equal(twitter.decode(last).node, h.worker);
      }
      await a.close();
      assert.throws(() => a.next(), idmint.ClosedError);
      await b.close();
    } finally {
      await client.close();
    }
  }));

test("a layout other than the namespace's is refused at lease time; HTTP alone cannot lease", () =>
  withNode(async (t) => {
    const client = new idmint.Client(t.urls("grpc"));
    try {
      await assert.rejects(client.localSnowflake("flake", { layout: idmint.Layout.preset("sonyflake") }), (e) => e.code === "layout_conflict");
      await assert.rejects(client.localSnowflake("seq"), (e) => e.code === "wrong_kind");
    } finally {
      await client.close();
    }
    const http = new idmint.Client(t.urls("http"), { transport: "http" });
    try {
      await assert.rejects(http.localSnowflake("flake"), (e) => e.code === "invalid_config" && /gRPC/.test(e.message));
    } finally {
      await http.close();
    }
  }));
