// A process making local snowflake ids, for the conformance suite's process cases
// (clients/conformance/README.md, "Local snowflake workers"; the same protocol in every
// language): `node local_snowflake_worker.mjs URL NAMESPACE COUNT TTL_MS`.
//
// Leases a worker id of NAMESPACE with a lease of TTL_MS (floor recorded TTL/2 ahead, margin and
// floor wait TTL/5), retrying a full pool or an unavailable node for 30 s; prints `worker N`,
// then each id on its own line as it is made (pausing 1 ms after every 10), and `error CODE` when `next` fails (once per run
// of one code; it keeps trying every millisecond). Stops after COUNT ids (0: never) or when its
// standard input closes, then closes the handle (releasing the lease) and prints `closed`. A
// refusal at lease time prints `error CODE` and exits with status 2.

import { writeSync } from "node:fs";
import { Client } from "@idmint/client";

const [url, ns, countArg, ttlArg] = process.argv.slice(2);
const count = Number(countArg);
const ttl = Number(ttlArg);
const options = { ttlMs: ttl, floorAheadMs: ttl / 2, safetyMarginMs: ttl / 5, maxFloorWaitMs: ttl / 5 };
let stop = false;
process.stdin.on("data", () => {});
process.stdin.on("end", () => {
  stop = true;
});
// Written synchronously, so a process killed with SIGKILL has printed every id it made.
const say = (line) => writeSync(1, `${line}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const client = new Client([url]);
const deadline = Date.now() + 30_000;
let handle;
for (;;) {
  try {
    handle = await client.localSnowflake(ns, options);
    break;
  } catch (e) {
    if ((e.retryable || e.code === "worker_pool_full") && Date.now() < deadline && !stop) {
      await sleep(20);
      continue;
    }
    say(`error ${e.code}`);
    process.exit(2);
  }
}
say(`worker ${handle.worker}`);
let made = 0;
let failing;
while ((count === 0 || made < count) && !stop) {
  let id;
  try {
    id = handle.next();
  } catch (e) {
    if (failing !== e.code) say(`error ${e.code}`);
    failing = e.code;
    await sleep(1);
    continue;
  }
  say(id);
  made += 1;
  failing = undefined;
  // A steady application, not a benchmark; the renewal timers and stdin run meanwhile.
  if (made % 10 === 0) await sleep(1);
}
await handle.close();
await client.close();
say("closed");
// Standard input, still open after COUNT ids, would keep the process alive.
process.exit(0);
