// Benchmark of @idmint/client (not a test): run `npm run build && node bench.mjs`.
//
// 1. Cached ids on one event loop: `Namespace.tryNext()` on a sequence namespace, refilled in
//    the background from a local node over gRPC, against a bare `bigint` increment loop, in
//    alternating rounds of the same shape (ROUND ids, yielding to the event loop every 65,536
//    ids so refills can land); best round of each. Target: at least 0.5x.
// 2. Ids/s from this process against one local node, against ioredis INCR against Redis: TASKS
//    async tasks each awaiting `client.next(ns)` (sustained: blocks are leased as demand asks,
//    each a gRPC round trip), or awaiting `redis.incr(key)` (one round trip per id, ioredis
//    auto-pipelining what the tasks send in one tick), for SECONDS each, alternating; best of each.
//    Target: at least 10x. Redis: $REDIS_URL, else 127.0.0.1:6379, else a private
//    redis-server on a free port.
//
// The node is a private `idmint serve` ($IDMINT_BIN, else <repo>/target/debug/idmint) on a
// temporary data directory, stopped at the end. Every id taken is checked to be above the one
// before it (per task), so nothing is measured that would be wrong.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { setImmediate as tick } from "node:timers/promises";
import Redis from "ioredis";
import { Client } from "@idmint/client";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "..", "..");
const bin = process.env.IDMINT_BIN ?? join(repo, "target", "debug", "idmint");
const ROUND = Number(process.env.ROUND ?? 20_000_000);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const TASKS = Number(process.env.TASKS ?? 64);
const SECONDS = Number(process.env.SECONDS ?? 2);
const YIELD_EVERY = 65_536;

if (!existsSync(bin)) {
  console.error(`bench: the idmint binary ${bin} is missing (cargo build -p idmint-cli, or set IDMINT_BIN)`);
  process.exit(1);
}

const freePort = () =>
  new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });

/** Starts `cmd args`, resolving once a stdout line matches `ready`. */
function start(cmd, args, ready) {
  const proc = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
  let err = "";
  proc.stderr.on("data", (d) => (err = (err + d).slice(-4000)));
  return new Promise((ok, fail) => {
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      if (ready.test(out)) ok(proc);
    });
    proc.once("exit", (code) => fail(new Error(`${cmd} exited (${code}) before it was ready: ${err}`)));
  });
}

const reachable = (host, port) =>
  new Promise((ok) => {
    const s = connect(port, host, () => {
      s.end();
      ok(true);
    });
    s.on("error", () => ok(false));
  });

const procs = [];
const dirs = [];
function cleanUp() {
  for (const p of procs) if (p.exitCode === null) p.kill("SIGTERM");
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
process.on("exit", cleanUp);
process.on("SIGINT", () => process.exit(130));

async function main() {
  const dir = mkdtempSync(join(tmpdir(), "idmint-bench-"));
  dirs.push(dir);
  const [http, grpc] = [await freePort(), await freePort()];
  writeFileSync(
    join(dir, "node.toml"),
    `[server]\nhttp = "127.0.0.1:${http}"\ngrpc = "127.0.0.1:${grpc}"\ndata_dir = "${join(dir, "data")}"\nauto_create = true\n`,
  );
  procs.push(await start(bin, ["serve", "--config", join(dir, "node.toml"), "--init"], /idmint listening on /));

  let redisUrl = process.env.REDIS_URL;
  if (redisUrl === undefined) {
    if (await reachable("127.0.0.1", 6379)) redisUrl = "redis://127.0.0.1:6379";
    else {
      const port = await freePort();
      procs.push(await start("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], /Ready to accept/));
      redisUrl = `redis://127.0.0.1:${port}`;
    }
  }

  const client = new Client(`http://127.0.0.1:${grpc}`);
  const ns = await client.namespace("bench");
  await ns.next();

  // 1. Cached ids on one event loop.
  const counterRound = async () => {
    let x = 0n;
    let last = -1n;
    const t0 = performance.now();
    for (let i = 0; i < ROUND; i++) {
      x += 1n;
      if (x <= last) throw new Error("counter went back");
      last = x;
      if ((i & (YIELD_EVERY - 1)) === 0) await tick();
    }
    return ROUND / ((performance.now() - t0) / 1000);
  };
  const cachedRound = async () => {
    let last = -1n;
    const t0 = performance.now();
    for (let i = 0; i < ROUND; i++) {
      const id = ns.tryNext() ?? (await ns.next());
      if (id <= last) throw new Error(`ids went back: ${last} then ${id}`);
      last = id;
      if ((i & (YIELD_EVERY - 1)) === 0) await tick();
    }
    return ROUND / ((performance.now() - t0) / 1000);
  };
  let bestCounter = 0;
  let bestCached = 0;
  const waitsBefore = ns.stats().waits;
  for (let r = 0; r < ROUNDS; r++) {
    bestCounter = Math.max(bestCounter, await counterRound());
    bestCached = Math.max(bestCached, await cachedRound());
  }
  const waits = ns.stats().waits - waitsBefore;

  // 2. Ids/s against one local node, against ioredis INCR.
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1, enableAutoPipelining: true });
  await redis.connect();
  const key = `idmint-bench:${process.pid}`;
  const sustained = async (take) => {
    const deadline = performance.now() + SECONDS * 1000;
    let total = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: TASKS }, async () => {
        let last = -1n;
        let n = 0;
        while ((n & 1023) !== 0 || performance.now() < deadline) {
          const id = BigInt(await take());
          if (id <= last) throw new Error(`ids went back: ${last} then ${id}`);
          last = id;
          n++;
        }
        total += n;
      }),
    );
    return total / ((performance.now() - t0) / 1000);
  };
  const next = () => client.next("bench-sustained");
  await next();
  let bestNode = 0;
  let bestRedis = 0;
  for (let r = 0; r < 3; r++) {
    bestNode = Math.max(bestNode, await sustained(next));
    bestRedis = Math.max(bestRedis, await sustained(() => redis.incr(key)));
  }
  await redis.del(key);
  redis.disconnect();
  const report = await client.close();

  const m = (x) => `${(x / 1e6).toFixed(2)}M/s`;
  console.log(`node ${process.version}, ${new Date().toISOString()}`);
  console.log(`cached   tryNext ${m(bestCached)}  vs bigint loop ${m(bestCounter)}  ratio ${(bestCached / bestCounter).toFixed(2)}x (target >= 0.5; best of ${ROUNDS} rounds of ${ROUND / 1e6}M; ${waits} calls waited on a refill)`);
  console.log(`node     next()  ${m(bestNode)}  vs ioredis INCR ${m(bestRedis)}  ratio ${(bestNode / bestRedis).toFixed(1)}x (target >= 10; ${TASKS} tasks, best of 3 rounds of ${SECONDS}s; redis ${redisUrl})`);
  console.log(`close: ${report.givenBack} ids given back, ${report.burned} burned`);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
