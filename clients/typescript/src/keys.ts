//! Routing a row from its key, offline, with the answers of `idmint decode` and `idmint
//! shard-for` (the shared vectors of clients/conformance/decode.json check the three clients):
//!
//! - `shardOf(id, layout)`: the shard an id names (its node field; Instagram's layout).
//! - `shardFor(key, shards)`: the logical shard of a key, `key % shards`.
//! - `residueOf(id, step)` and `memberOf(id, step, offsets)`: an id of a step/offset sequence
//!   (or of a multi authority) names its issuer by `id % step`; members are numbered from 1 in
//!   configuration order, as `idmint admin reseed --member` numbers them.
//! - `CompositeKey`: `(shard, local)` written `shard-local` (`42-1007`). The text is canonical:
//!   decimal 64-bit parts, no sign, no leading zero (`0` itself allowed), no spaces; anything
//!   else throws a `DecodeError` naming the part at fault.
//!
//! Invariant: all arithmetic is on `bigint`, so ids above 2^53 route exactly. Ids and keys are
//! a `bigint`, a safe integer `number`, or decimal text (ASCII digits only).

import { DecodeError, InvalidConfigError } from "./errors.js";
import { Layout } from "./layout.js";

const U64_LIMIT = 1n << 64n;

/** A 64-bit id or key: a `bigint` or safe integer in range, or text of ASCII digits only. */
export function parseKey(value: bigint | number | string, what = "id"): bigint {
  let n: bigint;
  if (typeof value === "bigint") n = value;
  else if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) throw new DecodeError(`${value} is not a 64-bit ${what} (use a bigint or text above 2^53)`);
    n = BigInt(value);
  } else {
    if (!/^[0-9]+$/.test(value)) throw new DecodeError(`${JSON.stringify(value)} is not a decimal 64-bit ${what}`);
    n = BigInt(value);
  }
  if (n < 0n || n >= U64_LIMIT) throw new DecodeError(`${String(value)} is not a decimal 64-bit ${what}`);
  return n;
}

function positive(n: bigint | number, what: string): bigint {
  const v = typeof n === "bigint" ? n : Number.isSafeInteger(n) ? BigInt(n) : -1n;
  if (v < 1n || v >= U64_LIMIT) throw new InvalidConfigError(`${what} must be a whole number from 1 to 2^64 - 1, not ${n}`);
  return v;
}

/** The logical shard of `key` among `shards`: `key % shards` (Instagram's `user_id % logical_shards`). */
export function shardFor(key: bigint | number | string, shards: bigint | number): bigint {
  return parseKey(key, "key") % positive(shards, "shards");
}

/** The shard an id was made on: its node field (`shard` of an Instagram-layout id). */
export function shardOf(id: bigint | number | string, layout: string | Layout = "instagram", epochUnixMs?: bigint | number): number {
  const resolved = typeof layout === "string" ? Layout.preset(layout, epochUnixMs) : layout;
  return resolved.decode(parseKey(id)).node;
}

/** The residue class of `id` modulo `step`: the offset of the sequence that issued it. */
export function residueOf(id: bigint | number | string, step: bigint | number): bigint {
  return parseKey(id) % positive(step, "step");
}

/**
 * The number (from 1, in the order given) of the member whose offset is `id`'s residue class
 * modulo `step`; `null` when no offset is.
 */
export function memberOf(id: bigint | number | string, step: bigint | number, offsets: readonly (bigint | number)[]): number | null {
  const residue = residueOf(id, step);
  const index = offsets.findIndex((o) => BigInt(o) === residue);
  return index < 0 ? null : index + 1;
}

function part(text: string, digits: string, name: string): bigint {
  const bad = (why: string) => new DecodeError(`${JSON.stringify(text)} is not a composite key: the ${name} ${why}`);
  if (digits === "") throw bad("is empty");
  if (!/^[0-9]+$/.test(digits)) throw bad("is not a decimal number");
  if (digits.length > 1 && digits.startsWith("0")) throw bad("has a leading zero");
  const n = BigInt(digits);
  if (n >= U64_LIMIT) throw bad(`is above ${U64_LIMIT - 1n}`);
  return n;
}

/** A row's key as the shard holding it and its id within that shard. */
export class CompositeKey {
  readonly shard: bigint;
  readonly local: bigint;

  constructor(shard: bigint | number, local: bigint | number) {
    this.shard = parseKey(shard, "shard");
    this.local = parseKey(local, "local id");
  }

  /** `shard-local` text, e.g. `42-1007`. */
  static parse(text: string): CompositeKey {
    const dash = text.indexOf("-");
    if (dash < 0) throw new DecodeError(`${JSON.stringify(text)} is not a composite key: expected SHARD-LOCAL, e.g. 42-1007`);
    return new CompositeKey(part(text, text.slice(0, dash), "shard"), part(text, text.slice(dash + 1), "local id"));
  }

  toString(): string {
    return `${this.shard}-${this.local}`;
  }

  equals(other: CompositeKey): boolean {
    return this.shard === other.shard && this.local === other.local;
  }
}
