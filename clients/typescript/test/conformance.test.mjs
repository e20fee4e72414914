// The client conformance suite (clients/conformance/README.md) for @idmint/client: every
// scenario of scenarios.json, once per transport it lists (this client has grpc and http),
// each against a topology of live `idmint serve` processes started for it. A scenario of a
// kind this runner does not know fails, and so does an unknown format.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as idmint from "@idmint/client";
import { CONFORMANCE, Topology, loadScenarios } from "./harness.mjs";

const suite = loadScenarios();
const TRANSPORTS = ["grpc", "http"];

test("the scenario format is one this runner knows", () => {
  assert.equal(suite.format, 1);
});

/** The scenario's client options, resolved against the topology. */
function clientOptions(s, topology, transport) {
  const o = s.client ?? {};
  const creds = {};
  if (o.token !== undefined) creds.token = suite.tokens[o.token];
  if (o.ca === true) creds.ca = readFileSync(join(topology.certs, "ca.pem"));
  if (o.ca === "other") creds.ca = readFileSync(join(topology.certs, "other-ca.pem"));
  if (o.cert === true) {
    creds.cert = readFileSync(join(topology.certs, "client.pem"));
    creds.key = readFileSync(join(topology.certs, "client.key"));
  }
  const options = { transport, tls: { ca: creds.ca, cert: creds.cert, key: creds.key } };
  if (creds.token !== undefined) options.token = creds.token;
  if (o.fixed_block !== undefined) options.buffer = { minBlock: o.fixed_block, maxBlock: o.fixed_block, lowWater: 0.5 };
  return { options, creds };
}

const U63 = (1n << 63n) - 1n;
const UUID7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ULID = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/;

/** Asserts `id` is an id of the namespace's kind. */
function assertKind(namespace, id) {
  const spec = suite.namespaces[namespace] ?? { kind: "sequence" };
  switch (spec.kind) {
    case "sequence":
    case "snowflake":
      assert.equal(typeof id, "bigint", `${namespace}: ${id} is a bigint`);
      assert.ok(id >= 1n && id <= U63, `${namespace}: ${id} in 1..2^63-1`);
      if (spec.max !== undefined) assert.ok(id <= BigInt(spec.max), `${namespace}: ${id} <= ${spec.max}`);
      break;
    case "uuid7":
      assert.match(id, UUID7);
      break;
    case "ulid":
      assert.match(id, ULID);
      break;
    default:
      assert.fail(`namespace ${namespace} of unknown kind ${spec.kind}`);
  }
}

/** Ids compare as numbers: bigints directly, UUID/ULID canonical text in text order. */
function assertIncreasing(ids, what) {
  for (let i = 1; i < ids.length; i++) {
    assert.ok(ids[i - 1] < ids[i], `${what}: ${ids[i - 1]} then ${ids[i]}`);
  }
}

function assertDistinct(ids, what) {
  assert.equal(new Set(ids).size, ids.length, `${what}: ${ids.length - new Set(ids).size} ids repeat`);
}

/** `workers` concurrent async tasks, each running `body(worker, ids)`; their ids. */
async function workers(n, body) {
  const lists = Array.from({ length: n }, () => []);
  await Promise.all(lists.map((ids, w) => body(w, ids)));
  return lists;
}

const kinds = {
  async unique_concurrent(s, t, transport) {
    const { options } = clientOptions(s, t, transport);
    const client = new idmint.Client(t.urls(transport), options);
    try {
      const lists = await workers(s.workers, async (_, ids) => {
        for (let i = 0; i < s.ids_per_worker; i++) ids.push(await client.next(s.namespace));
      });
      lists.forEach((ids, w) => assertIncreasing(ids, `worker ${w}`));
      const all = lists.flat();
      assert.equal(all.length, s.workers * s.ids_per_worker);
      assertDistinct(all, "all workers");
      for (const id of all) assertKind(s.namespace, id);
    } finally {
      await client.close();
    }
  },

  async batches(s, t, transport) {
    const { options } = clientOptions(s, t, transport);
    const client = new idmint.Client(t.urls(transport), options);
    try {
      const all = [];
      for (let b = 0; b < s.batches; b++) {
        const ids = await client.nextBatch(s.namespace, s.batch_size);
        assert.equal(ids.length, s.batch_size);
        assertIncreasing(ids, `batch ${b}`);
        if (all.length > 0) assert.ok(all[all.length - 1] < ids[0], `batch ${b} starts above the one before`);
        all.push(...ids);
      }
      assertDistinct(all, "all batches");
      for (const id of all) assertKind(s.namespace, id);
    } finally {
      await client.close();
    }
  },

  async give_back(s, t, transport) {
    const { options, creds } = clientOptions(s, t, transport);
    const a = new idmint.Client(t.urls(transport), options);
    const taken = [];
    try {
      for (let i = 0; i < s.take; i++) taken.push(await a.next(s.namespace));
    } finally {
      const report = await a.close();
      assert.equal(report.burned, 0, "a clean close burns nothing on the client");
    }
    const info = await t.getJson(`/v1/namespaces/${s.namespace}`, creds);
    assert.equal(info.state.ids_burned, 0, "the node burned nothing");
    assert.equal(info.state.ids_served, s.take, "the node took the unused tail back");
    const b = new idmint.Client(t.urls(transport), options);
    try {
      assert.equal(await b.next(s.namespace), taken[taken.length - 1] + 1n, "the next client starts where A stopped");
    } finally {
      await b.close();
    }
  },

  async failover(s, t, transport) {
    const { options } = clientOptions(s, t, transport);
    const client = new idmint.Client(t.urls(transport), options);
    try {
      const lists = Array.from({ length: s.workers }, () => []);
      const phase = (n) =>
        Promise.all(lists.map(async (ids) => {
          for (let i = 0; i < n; i++) ids.push(await client.next(s.namespace));
        }));
      await phase(s.ids_before);
      await t.nodes.get(s.kill).kill("SIGKILL");
      await phase(s.ids_after);
      lists.forEach((ids, w) => {
        assert.equal(ids.length, s.ids_before + s.ids_after);
        assertIncreasing(ids, `worker ${w}`);
      });
      assertDistinct(lists.flat(), "all workers");
      for (const id of lists.flat()) assertKind(s.namespace, id);
    } finally {
      await client.close();
    }
  },

  async error(s, t, transport) {
    const { options } = clientOptions(s, t, transport);
    const client = new idmint.Client(t.urls(transport), options);
    const run = async (call) => {
      switch (call.op) {
        case "next":
          return client.next(call.namespace);
        case "next_batch":
          return client.nextBatch(call.namespace, call.count);
        case "info":
          return client.info(call.namespace);
        case "decode":
          return client.decode(call.namespace, call.id);
        case "take": {
          let ok = 0;
          for (;;) {
            if (ok >= call.limit) assert.fail(`${call.limit} calls of next did not raise`);
            try {
              await client.next(call.namespace);
            } catch (e) {
              if (s.ids_before !== undefined) assert.equal(ok, s.ids_before, "calls that succeeded first");
              throw e;
            }
            ok++;
          }
        }
        default:
          assert.fail(`unknown op ${call.op}`);
      }
    };
    try {
      for (const before of s.call.after ?? []) await run(before);
      if (s.call.after_close) await client.close();
      await assert.rejects(run(s.call), (e) => {
        assertTyped(e, s.expect);
        return true;
      });
    } finally {
      await client.close();
    }
  },

  async info(s, t, transport) {
    const { options } = clientOptions(s, t, transport);
    const client = new idmint.Client(t.urls(transport), options);
    try {
      const info = await client.info(s.namespace);
      assert.equal(info.kind, s.expect_kind);
      assert.equal(info.namespace, s.namespace);
    } finally {
      await client.close();
    }
  },

  async error_table() {
    const message = "what a person reads";
    for (const entry of suite.error_codes) {
      const cls = idmint.ERROR_CLASSES[entry.code];
      assert.ok(cls !== undefined, `a class for ${entry.code}`);
      const made = [];
      if (entry.grpc !== null) {
        made.push(idmint.fromGrpc({ code: idmint.grpcStatusNumber(entry.grpc), details: `${entry.code}: ${message}`, idmintCode: entry.code }, "node #1"));
      }
      if (entry.http !== null) {
        made.push(idmint.fromHttp(entry.http, JSON.stringify({ error: { code: entry.code, message } }), "node #1"));
      }
      for (const e of made) {
        assert.equal(e.constructor, cls, `${entry.code}: ${e.constructor.name}`);
        assert.equal(e.code, entry.code);
        assert.equal(e.message, message);
        assert.ok(e instanceof idmint.NodeError && e instanceof idmint.IdmintError);
      }
    }
    // Each class is specific to its code.
    const classes = Object.values(idmint.ERROR_CLASSES);
    assert.equal(new Set(classes).size, classes.length);
    // A newer server's code: the base type, the code kept.
    const unknown = idmint.fromHttp(409, JSON.stringify({ error: { code: "brand_new", message } }));
    assert.equal(unknown.constructor, idmint.NodeError);
    assert.equal(unknown.code, "brand_new");
    const unknownGrpc = idmint.fromGrpc({ code: 9, details: `brand_new: ${message}`, idmintCode: "brand_new" });
    assert.equal(unknownGrpc.constructor, idmint.NodeError);
    assert.equal(unknownGrpc.code, "brand_new");
    // The client's own codes.
    const own = { unavailable: idmint.UnavailableError, closed: idmint.ClosedError };
    for (const { code } of suite.client_error_codes) {
      assert.ok(own[code] !== undefined, `a class for the client code ${code}`);
    }
    assert.equal(new idmint.UnavailableError("x").code, "unavailable");
    assert.equal(new idmint.ClosedError().code, "closed");
    // A status without the trailer (the connection failed): unavailable.
    assert.ok(idmint.fromGrpc({ code: 14, details: "connection refused" }) instanceof idmint.UnavailableError);
  },

  async decode_offline(s) {
    const file = JSON.parse(readFileSync(join(CONFORMANCE, s.file), "utf8"));
    assert.ok(file.cases.length > 0, "decode cases");
    for (const c of file.cases) {
      const what = JSON.stringify(c);
      if (c.layout === "composite" || c.step !== undefined || c.shards !== undefined) {
        if (c.error === true) {
          assert.throws(() => route(c), (e) => e.code === "invalid_id" && e instanceof idmint.IdmintError, what);
          continue;
        }
        assert.deepEqual(route(c), c.expect, what);
        continue;
      }
      const layout = c.bits !== undefined ? idmint.Layout.custom(c.bits, c.unit, c.epoch) : c.layout;
      const epoch = c.bits !== undefined ? undefined : c.epoch;
      if (c.error === true) {
        assert.throws(() => idmint.decode(c.id, layout, epoch), (e) => e.code === "invalid_id" && e instanceof idmint.IdmintError, what);
        continue;
      }
      const got = idmint.decode(c.id, layout, epoch);
      for (const [key, value] of Object.entries(c.expect)) assert.deepEqual(got[key], value, `${what}: ${key}`);
    }
  },
};

/**
 * What `idmint decode --layout composite`, `decode --step` or `shard-for` answers for a case of
 * decode.json, made with the package's routing helpers (numbers as JSON.parse reads them).
 */
function route(c) {
  if (c.shards !== undefined) {
    const key = idmint.parseKey(c.key, "key");
    return { kind: "shard_for", key: key.toString(), shards: c.shards, shard: Number(idmint.shardFor(key, BigInt(c.shards))) };
  }
  if (c.step !== undefined) {
    const id = idmint.parseKey(c.id);
    const out = { kind: "residue", id: id.toString(), step: c.step, residue: Number(idmint.residueOf(id, c.step)) };
    if (c.offsets !== undefined) out.member = idmint.memberOf(id, c.step, c.offsets);
    return out;
  }
  const k = idmint.CompositeKey.parse(c.id);
  assert.ok(idmint.CompositeKey.parse(k.toString()).equals(k));
  return { kind: "composite", id: k.toString(), shard: Number(k.shard), local: k.local.toString() };
}

/** Asserts `e` is the typed error of `code`. */
function assertTyped(e, code) {
  const own = { unavailable: idmint.UnavailableError, closed: idmint.ClosedError };
  const cls = idmint.ERROR_CLASSES[code] ?? own[code];
  assert.ok(cls !== undefined, `a class for ${code}`);
  assert.ok(e instanceof cls, `expected ${cls.name} (${code}), got ${e?.constructor?.name}: ${e?.code}: ${e?.message}`);
  assert.equal(e.code, code);
}

for (const s of suite.scenarios) {
  const run = kinds[s.kind];
  const needsNodes = s.topology !== undefined;
  const transports = needsNodes ? (s.transports ?? ["grpc"]).filter((t) => TRANSPORTS.includes(t)) : [undefined];
  for (const transport of transports) {
    const name = `${s.name} [${s.kind}${transport ? `, ${transport}` : ""}]`;
    test(name, { timeout: 120_000 }, async () => {
      if (run === undefined) assert.fail(`scenario ${JSON.stringify(s.name)}: unknown kind ${JSON.stringify(s.kind)}`);
      if (!needsNodes) return run(s);
      const spec = suite.topologies[s.topology];
      assert.ok(spec !== undefined, `topology ${s.topology}`);
      const topology = await Topology.start(spec);
      try {
        await run(s, topology, transport);
      } finally {
        await topology.stop();
      }
    });
  }
}
