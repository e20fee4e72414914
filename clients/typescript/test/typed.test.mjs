// Typed handles per kind (`client.sequence(...)` and the rest), the Prometheus view of a
// client's counters (`@idmint/client/metrics`), and the README's examples compiled by tsc
// (run_tests.sh puts their output in ./examples-out): the ESM one run here, the CommonJS one
// loaded with require() from a CommonJS script in a child process.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { promisify } from "node:util";
import * as idmint from "@idmint/client";
import { registerMetrics } from "@idmint/client/metrics";
import { Registry } from "prom-client";
import { Topology, loadScenarios } from "./harness.mjs";

const suite = loadScenarios();

async function withNode(body) {
  const t = await Topology.start(suite.topologies.single);
  try {
    await body(t);
  } finally {
    await t.stop();
  }
}

const KINDS = { seq: "sequence", flake: "snowflake", uuids: "uuid7", ulids: "ulid" };
const TYPES = { sequence: "bigint", snowflake: "bigint", uuid7: "string", ulid: "string" };

test("each typed handle gives its kind's ids and refuses every other kind", () =>
  withNode(async (t) => {
    const client = new idmint.Client(t.urls("grpc"));
    try {
      for (const [name, kind] of Object.entries(KINDS)) {
        for (const handleKind of Object.keys(TYPES)) {
          const ids = client[handleKind](name);
          assert.equal(ids.tryNext(), undefined, "nothing held before first use");
          if (handleKind === kind) {
            const got = await ids.nextBatch(2);
            assert.deepEqual(got.map((i) => typeof i), [TYPES[kind], TYPES[kind]]);
            const third = await ids.next();
            assert.ok(got[0] < got[1] && got[1] < third, `${name}: ${got} ${third}`);
            continue;
          }
          for (let i = 0; i < 2; i++) {
            // At first use, and again: never an id of the wrong kind.
            await assert.rejects(ids.next(), (e) => {
              assert.ok(e instanceof idmint.WrongKindError);
              assert.equal(e.code, "wrong_kind");
              assert.equal(
                e.message,
                `namespace ${name} is a ${kind} namespace, not ${handleKind}: client.${handleKind}() is for ${handleKind} namespaces; use client.${kind}("${name}")`,
              );
              return true;
            });
          }
        }
      }
      assert.equal(typeof (await client.next("uuids")), "string", "the untyped call stays");
    } finally {
      await client.close();
    }
  }));

test("a time-ordered handle never creates a namespace; a sequence handle does", () =>
  withNode(async (t) => {
    const client = new idmint.Client(t.urls("grpc"));
    try {
      for (const kind of ["snowflake", "uuid7", "ulid"]) {
        await assert.rejects(client[kind]("absent").next(), idmint.UnknownNamespaceError);
      }
      await assert.rejects(t.getJson("/v1/namespaces/absent"), /404/);
      assert.equal(await client.sequence("absent").next(), 1n);
    } finally {
      await client.close();
    }
  }));

/** sample name + namespace label -> value, from prom-client's text exposition. */
async function scrape(registry) {
  const out = new Map();
  for (const line of (await registry.metrics()).split("\n")) {
    const m = /^(\w+)\{namespace="([^"]+)",kind="(\w+)"\} (\S+)$/.exec(line);
    if (m) {
      assert.ok(["sequence", "snowflake", "uuid7", "ulid"].includes(m[3]));
      out.set(`${m[1]} ${m[2]}`, Number(m[4]));
    }
  }
  return out;
}

test("the metrics expose each namespace's buffered ids, refills, give-backs and burns", () =>
  withNode(async (t) => {
    const registry = new Registry();
    const client = new idmint.Client(t.urls("grpc"), { buffer: { minBlock: 1000, maxBlock: 1000 } });
    registerMetrics(client, registry);
    assert.equal((await scrape(registry)).size, 0, "nothing set up yet");
    const orders = client.sequence("seq_fixed");
    assert.deepEqual(await orders.nextBatch(3), [1n, 2n, 3n]);
    await client.ulid("ulids").nextBatch(5);
    const stats = orders.stats();
    let m = await scrape(registry);
    assert.equal(m.get("idmint_client_served_ids_total seq_fixed"), 3);
    assert.equal(m.get("idmint_client_buffered_ids seq_fixed"), stats.buffered);
    assert.ok(stats.refills >= 1);
    assert.equal(m.get("idmint_client_refills_total seq_fixed"), stats.refills);
    assert.equal(stats.buffered, 1000 * stats.refills - 3);
    assert.equal(m.get("idmint_client_given_back_ids_total seq_fixed"), 0);
    assert.equal(m.get("idmint_client_burned_ids_total seq_fixed"), 0);
    assert.equal(m.get("idmint_client_served_ids_total ulids"), 5);
    assert.ok(m.get("idmint_client_refills_total ulids") >= 1);
    const received = 1000 * stats.refills;
    await client.close();
    m = await scrape(registry);
    // A clean close hands every unused id back.
    assert.equal(m.get("idmint_client_given_back_ids_total seq_fixed"), received - 3);
    assert.equal(m.get("idmint_client_burned_ids_total seq_fixed"), 0);
    assert.equal(m.get("idmint_client_buffered_ids seq_fixed"), 0);
    // One client per registry.
    assert.throws(() => registerMetrics(client, registry), /one client per registry/);
  }));

test("the typed ESM example, compiled by tsc --strict, runs on gRPC and HTTP", () =>
  withNode(async (t) => {
    const { main } = await import("./examples-out/typed.js");
    await main(t.urls("grpc"));
    await main(t.urls("http"), "http");
  }));

test("a CommonJS script require()s the packed package and its metrics entry", () =>
  withNode(async (t) => {
    // A .cjs file: require() resolves the package's `require` condition (dist/cjs), and the
    // CommonJS build finds its .proto files (a gRPC call is made).
    writeFileSync(
      "require-check.cjs",
      `const assert = require("node:assert/strict");
const idmint = require("@idmint/client");
assert.equal(typeof idmint.Client, "function");
assert.ok(require.resolve("@idmint/client").endsWith("/dist/cjs/index.js"));
const { main } = require("./examples-out/commonjs.cjs");
main(process.argv.slice(2)).then((r) => {
  process.stdout.write(JSON.stringify({ id: String(r.id), unknown: r.unknown, metrics: r.metrics }));
});
`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, ["require-check.cjs", ...t.urls("grpc")]);
    const r = JSON.parse(stdout);
    assert.equal(r.id, "1");
    assert.equal(r.unknown, true);
    assert.match(r.metrics, /^idmint_client_served_ids_total\{namespace="seq",kind="sequence"\} 1$/m);
  }));
