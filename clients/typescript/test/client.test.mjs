// @idmint/client beyond the shared conformance suite: ids as number only where safe, HTTP/JSON
// as the fallback of a gRPC node, the background refill below the low-water mark, exact
// counts on close, the validity window of time-ordered batches, TLS material from files.
// Each test starts its own nodes (clients/conformance topologies) and stops them.

import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { setImmediate as tick } from "node:timers/promises";
import * as idmint from "@idmint/client";
import { Topology, freePort, loadScenarios } from "./harness.mjs";

const suite = loadScenarios();

async function withTopology(name, body) {
  const t = await Topology.start(suite.topologies[name]);
  try {
    await body(t);
  } finally {
    await t.stop();
  }
}

/** Yields to the event loop until `condition()` holds (at most `limit` turns). */
async function until(condition, what, limit = 200_000) {
  for (let i = 0; i < limit; i++) {
    if (condition()) return;
    await tick();
  }
  assert.fail(`never: ${what}`);
}

test("ids are numbers only by opt-in and only where every id is a safe integer", () =>
  withTopology("single", async (t) => {
    const client = new idmint.Client(t.urls("grpc"));
    try {
      const js = await client.namespace("js", { ids: "number" });
      const ids = await js.nextBatch(500);
      for (const id of ids) assert.ok(Number.isSafeInteger(id) && id > 0, `${id} is a safe integer`);
      for (let i = 1; i < ids.length; i++) assert.ok(ids[i - 1] < ids[i]);
      // The default is bigint, and decimal text on request.
      assert.equal(typeof (await client.next("js")), "bigint");
      const text = await (await client.namespace("flake", { ids: "string" })).next();
      assert.match(text, /^[0-9]{1,19}$/);
      assert.ok(BigInt(text) > 2n ** 53n, "a twitter id of today is above 2^53");
      for (const name of ["flake", "seq"]) {
        await assert.rejects(client.namespace(name, { ids: "number" }), idmint.UnsafeIdError);
      }
      // A 32-bit sequence never exceeds 2^31 - 1.
      assert.equal(typeof (await (await client.namespace("tiny", { ids: "number" })).next()), "number");
    } finally {
      await client.close();
    }
  }));

test("ids above 2^53 are exact bigints, consecutive, on both wires", () =>
  withTopology("single", async (t) => {
    const above = 2n ** 60n;
    await t.requestJson("POST", `/v1/admin/rebase/seq?above=${above}`);
    for (const transport of ["grpc", "http"]) {
      const client = new idmint.Client(t.urls(transport), { transport, buffer: { minBlock: 1000, maxBlock: 1000 } });
      try {
        const ns = await client.namespace("seq");
        const ids = [await ns.next()];
        for (let i = 0; i < 2500; i++) ids.push(ns.tryNext() ?? (await ns.next()));
        assert.ok(ids[0] > above, `${ids[0]} above ${above}`);
        for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `${ids[i - 1]} then ${ids[i]}`);
        // Within a block ids are consecutive: no precision lost to a double.
        assert.equal(ids[1] - ids[0], 1n);
        const text = await (await client.namespace("seq", { ids: "string" })).next();
        assert.ok(BigInt(text) > ids[ids.length - 1]);
      } finally {
        await client.close();
      }
    }
  }));

test("after a failover no id below those held is served: gRPC asks for blocks above them (min_start), HTTP cuts them away", async () => {
  for (const transport of ["grpc", "http"]) {
    const t = await Topology.start(suite.topologies.tiers);
    try {
      const client = new idmint.Client(t.urls(transport), { transport, buffer: { minBlock: 1000, maxBlock: 1000 } });
      const ns = await client.namespace("seq");
      const before = await ns.nextBatch(3000);
      await t.nodes.get("r1").kill();
      const after = await ns.nextBatch(3000);
      const ids = [...before, ...after];
      for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `${transport}: ${ids[i - 1]} then ${ids[i]}`);
      const s = ns.stats();
      assert.equal(s.served, 6000);
      // r2 set the namespace up at its start, buffering ids of the global node below the ones
      // r1 handed out since. Asked with the client's floor, it grants from its source instead;
      // over HTTP (no floor) its block lies below and is burned whole, never served.
      if (transport === "grpc") assert.equal(s.burned, 0, "grpc: nothing cut");
      else assert.ok(s.burned >= 1000, `http: the block below was cut away (burned ${s.burned})`);
      await client.close();
    } finally {
      await t.stop();
    }
  }
});

test("a node unreachable over gRPC is served over its HTTP/JSON API", () =>
  withTopology("single", async (t) => {
    const closed = await freePort();
    const http = t.urls("http")[0];
    const client = new idmint.Client([`http://127.0.0.1:${closed}`, { url: http, transport: "http" }], {
      buffer: { minBlock: 5000, maxBlock: 5000 },
    });
    const seq = await client.namespace("seq");
    try {
      const ids = await seq.nextBatch(2000);
      assert.equal(new Set(ids).size, 2000);
      assert.equal(typeof (await client.next("uuids")), "string");
    } finally {
      // Within its newest block (no refill below half of it): the tail goes back whole.
      const report = await client.close();
      assert.equal(report.burned, 0);
      const s = seq.stats();
      assert.deepEqual([s.served, s.burned, s.buffered, s.givenBack], [2000, 0, 0, report.givenBack]);
      assert.ok(report.givenBack >= 3000);
    }
  }));

for (const transport of ["grpc", "http"]) {
  test(`the buffer refills in the background below the low-water mark, and a close after the refill burns nothing (${transport})`, () =>
    withTopology("single", async (t) => {
      const block = 1000;
      const client = new idmint.Client(t.urls(transport), {
        transport,
        buffer: { minBlock: block, maxBlock: block, lowWater: 0.5 },
      });
      const ns = await client.namespace("seq_fixed");
      const first = await ns.next(); // the first block
      let last = first;
      // Below half a block: a refill starts without anyone waiting.
      for (let i = 0; i < block / 2; i++) {
        const id = ns.tryNext();
        assert.ok(id !== undefined && id > last);
        last = id;
      }
      await until(() => ns.stats().refills === 2, "the second block arrives");
      const s = ns.stats();
      assert.equal(s.waits, 1, "only the first call waited");
      assert.equal(s.served, block / 2 + 1);
      assert.equal(s.buffered, 2 * block - s.served);
      const report = await client.close();
      // The refill extended the first block's lease: what is left of both goes back.
      assert.deepEqual([report.givenBack, report.burned], [2 * block - s.served, 0]);
      const after = ns.stats();
      assert.equal(after.served + after.burned + after.givenBack, 2 * block);
      assert.equal(ns.tryNext(), undefined, "nothing is handed out after close");
      await assert.rejects(ns.next(), idmint.ClosedError);
      const state = await t.requestJson("GET", "/v1/namespaces/seq_fixed");
      assert.deepEqual([state.state.ids_served, state.state.ids_burned], [s.served, 0]);
      const again = new idmint.Client(t.urls(transport), { transport });
      try {
        assert.equal(await again.next("seq_fixed"), last + 1n);
      } finally {
        await again.close();
      }
    }));
}

test("time-ordered ids older than the validity window are dropped, never handed out", () =>
  withTopology("single", async (t) => {
    let now = 0;
    const client = new idmint.Client(t.urls("grpc"), { validityMs: 1000, now: () => now });
    try {
      const ns = await client.namespace("flake");
      const first = await ns.next(); // a batch of 16, stamped at 0
      now = 1001;
      const second = await ns.next();
      assert.ok(second > first);
      const s = ns.stats();
      assert.equal(s.expired, 15, "the rest of the first batch expired");
      assert.equal(s.served, 2);
    } finally {
      await client.close();
    }
  }));

test("TLS material is read from files; a missing file is an InvalidConfigError naming it", () =>
  withTopology("mtls", async (t) => {
    const certs = t.certs;
    const client = new idmint.Client(t.urls("grpc"), {
      tls: { caFile: join(certs, "ca.pem"), certFile: join(certs, "client.pem"), keyFile: join(certs, "client.key") },
    });
    try {
      assert.equal((await client.nextBatch("seq", 10)).length, 10);
    } finally {
      await client.close();
    }
    assert.throws(
      () => new idmint.Client(t.urls("grpc"), { tls: { caFile: join(certs, "missing.pem") } }),
      (e) => e instanceof idmint.InvalidConfigError && e.message.includes("missing.pem"),
    );
  }));

test("offline decoding takes bigints and gives the node field its layout's name", () => {
  const d = idmint.decode(175928847299117063n, "discord");
  assert.equal(d.timestamp, "2016-04-30T11:18:25.796Z");
  assert.equal(d.worker, 1);
  assert.equal(d.process, 0);
  assert.equal(d.sequence, 7);
  assert.equal(idmint.decode("01ARZ3NDEKTSV4RRFFQ69G5FAV", "ulid").unix_ms, 1469922850259);
  assert.throws(() => idmint.decode("9007199254740992", "js53"), idmint.DecodeError);
  assert.ok(idmint.Layout.preset("js53").jsSafe && !idmint.Layout.preset("twitter").jsSafe);
});

test("routing helpers: an id's shard, a key's shard, residue classes and composite keys, exact above 2^53", () => {
  // Instagram's example: shard 1341 of 2000 logical shards, user 31341.
  const id = (1_387_263_000n << 23n) | (1341n << 10n) | (5001n % 1024n);
  assert.equal(idmint.shardOf(id), 1341);
  assert.equal(idmint.shardOf(id.toString(), "instagram", 0), 1341);
  assert.equal(idmint.shardFor(31341, 2000), 1341n);
  assert.equal(idmint.residueOf(9007199254740993n, 2), 1n);
  assert.equal(idmint.memberOf(13, 4, [3, 1, 2]), 2);
  assert.equal(idmint.memberOf(16n, 4n, [3n, 1n, 2n]), null);
  assert.throws(() => idmint.residueOf(1, 0), idmint.InvalidConfigError);
  assert.throws(() => idmint.residueOf(2 ** 53, 2), idmint.DecodeError);
  assert.throws(() => idmint.shardOf(1n << 63n), idmint.DecodeError);
  const k = new idmint.CompositeKey(42, 1007n);
  assert.equal(k.toString(), "42-1007");
  assert.ok(idmint.CompositeKey.parse("42-1007").equals(k));
  assert.throws(() => idmint.CompositeKey.parse("042-1"), /shard has a leading zero/);
  assert.throws(() => idmint.CompositeKey.parse("4-"), /local id is empty/);
  assert.throws(() => new idmint.CompositeKey(-1, 0), idmint.DecodeError);
});

test("a shard or key is checked before anything is sent, and sent as its one field", async () => {
  assert.equal(idmint.routeFields(undefined), undefined);
  assert.equal(idmint.routeFields({}), undefined);
  assert.deepEqual(idmint.routeFields({ shard: 7 }), { shard: "7" });
  assert.deepEqual(idmint.routeFields({ key: 2n ** 64n - 1n }), { key: "18446744073709551615" });
  assert.throws(() => idmint.routeFields({ shard: 1, key: 2 }), idmint.InvalidRequestError);
  for (const bad of [-1, 1.5, 2n ** 64n, -1n, Number.MAX_SAFE_INTEGER + 1]) {
    assert.throws(() => idmint.routeFields({ shard: bad }), (e) => e instanceof idmint.InvalidRequestError && /^shard/.test(e.message));
    assert.throws(() => idmint.routeFields({ key: bad }), (e) => e instanceof idmint.InvalidRequestError && /^key/.test(e.message));
  }
  assert.equal(idmint.idsQuery(3, undefined), "count=3");
  assert.equal(idmint.idsQuery(3, { shard: "7" }), "count=3&shard=7");
  assert.equal(idmint.idsQuery(1, { key: "42" }), "count=1&key=42");
  // Both at once is refused by the client itself: nothing listens at this url.
  const client = new idmint.Client(`http://127.0.0.1:${await freePort()}`);
  try {
    await assert.rejects(client.next("photos", { shard: 1, key: 2 }), idmint.InvalidRequestError);
    await assert.rejects(client.nextBatch("photos", 3, { shard: 1, key: 2 }), idmint.InvalidRequestError);
    await assert.rejects(client.nextBatch("photos", 0, { shard: 1 }), idmint.InvalidCountError);
  } finally {
    await client.close();
  }
});

test("a shard or key sent to an ordinary namespace is invalid_request on both wires, and hands out nothing", () =>
  withTopology("single", async (t) => {
    for (const transport of ["grpc", "http"]) {
      const client = new idmint.Client(t.urls(transport), { transport });
      try {
        for (const ns of ["seq_fixed", "flake"]) {
          for (const route of [{ shard: 7 }, { key: 42n }]) {
            const named = (e) => e instanceof idmint.InvalidRequestError && e.code === "invalid_request" && e.message.includes(`"${ns}"`);
            await assert.rejects(client.nextBatch(ns, 2, route), named, `${transport} ${ns}`);
            await assert.rejects(client.next(ns, route), named);
          }
        }
      } finally {
        await client.close();
      }
    }
    // Nothing was handed out of the sequence namespace: its first id comes next.
    const client = new idmint.Client(t.urls("grpc"));
    try {
      assert.equal(await client.next("seq_fixed"), 1n);
    } finally {
      await client.close();
    }
  }));
