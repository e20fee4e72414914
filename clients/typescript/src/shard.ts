//! Ids of one shard of a snowflake namespace with `shards = "owned"` (docs/configuration.md),
//! whose ids' node field is the data's shard. A request names the shard by number or by a
//! key the node maps to one (`key % logical_shards`), never both; the client checks that before
//! anything is sent. Routed ids are fetched per call and never buffered: a namespace's buffer
//! holds ids of whatever shard the node chose.

import { InvalidRequestError } from "./errors.js";

/** Which shard a request for ids names: `shard`, or `key` (its shard), never both. */
export interface ShardRoute {
  /** The shard, 0 to the namespace's `logical_shards - 1`. */
  shard?: bigint | number | undefined;
  /** A key whose shard the ids are of. */
  key?: bigint | number | undefined;
}

/** A route's one field as the wire carries it (decimal text). */
export type RouteFields = { shard: string } | { key: string };

const MAX_U64 = (1n << 64n) - 1n;

function decimal(name: string, value: bigint | number): string {
  const whole = typeof value === "bigint" || Number.isSafeInteger(value);
  if (whole) {
    const v = BigInt(value);
    if (v >= 0n && v <= MAX_U64) return v.toString();
  }
  throw new InvalidRequestError("invalid_request", `${name} must be a whole number from 0 to 2^64 - 1, got ${String(value)}`);
}

/**
 * The wire fields of `route`, checked: `undefined` when it names no shard; `InvalidRequestError`
 * for both at once or a value that is not a 64-bit whole number.
 */
export function routeFields(route: ShardRoute | undefined): RouteFields | undefined {
  const shard = route?.shard;
  const key = route?.key;
  if (shard !== undefined && key !== undefined) {
    throw new InvalidRequestError("invalid_request", "give shard or key, not both: a key names its shard");
  }
  if (shard !== undefined) return { shard: decimal("shard", shard) };
  if (key !== undefined) return { key: decimal("key", key) };
  return undefined;
}

/** The query of `GET /v1/ids`: `count`, and the route's field when given. */
export function idsQuery(count: number, route: RouteFields | undefined): string {
  let query = `count=${count}`;
  if (route !== undefined && "shard" in route) query += `&shard=${route.shard}`;
  if (route !== undefined && "key" in route) query += `&key=${route.key}`;
  return query;
}
