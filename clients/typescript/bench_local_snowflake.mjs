// Benchmark (not a test): local snowflake ids per second on one event loop,
// `LocalSnowflake.next()` (a worker id leased from a running node, renewed by timers) beside
// the npm packages `@sapphire/snowflake` (the most downloaded) and `nodejs-snowflake` (Rust
// compiled to WebAssembly) on the twitter layout, in alternating rounds; the best of each.
//
// Usage: node bench_local_snowflake.mjs GRPC_URL [ROUNDS], with @idmint/client and the peers
// installed (bench/local_snowflake/run.sh does both and starts the node).

import { Client } from "@idmint/client";
import { Snowflake } from "@sapphire/snowflake";
import { Snowflake as WasmSnowflake } from "nodejs-snowflake";

const ROUND_MS = 500;
const EPOCH = 1288834974657n;

function rate(take) {
  let n = 0;
  const start = performance.now();
  for (;;) {
    for (let i = 0; i < 10_000; i++) take();
    n += 10_000;
    const elapsed = performance.now() - start;
    if (elapsed >= ROUND_MS) return (n * 1000) / elapsed;
  }
}

const [url, roundsArg] = process.argv.slice(2);
const rounds = Number(roundsArg ?? 5);
const client = new Client([url]);
const local = await client.localSnowflake("tweets");
const sapphire = new Snowflake(EPOCH);
const wasm = new WasmSnowflake({ custom_epoch: Number(EPOCH), instance_id: local.worker });
const best = { local: 0, sapphire: 0, wasm: 0 };
for (let r = 0; r < rounds; r++) {
  best.local = Math.max(best.local, rate(() => local.next()));
  best.sapphire = Math.max(best.sapphire, rate(() => sapphire.generate({ workerId: BigInt(local.worker) })));
  best.wasm = Math.max(best.wasm, rate(() => wasm.getUniqueID()));
  // Let the renewal timers run between rounds, as an application's event loop would.
  await new Promise((r) => setImmediate(r));
}
await local.close();
await client.close();
const m = (x) => `${(x / 1e6).toFixed(2)}M ids/s`;
console.log(`| Node.js ${process.versions.node}, 1 event loop (best of ${rounds} alternating ${ROUND_MS} ms rounds) | idmint \`LocalSnowflake.next\` | \`@sapphire/snowflake\` | ratio | \`nodejs-snowflake\` | ratio |`);
console.log("|---|---|---|---|---|---|");
console.log(`| twitter 41/10/12 | ${m(best.local)} | ${m(best.sapphire)} | ${(best.local / best.sapphire).toFixed(2)}x | ${m(best.wasm)} | ${(best.local / best.wasm).toFixed(2)}x |`);
