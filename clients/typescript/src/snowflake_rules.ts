//! The rules of a snowflake generator driven by a worker lease, without IO (docs/design.md
//! invariant 4; the rules of idmint-core's `lease_window` and `SnowflakeGenerator`):
//!
//! - time is the monotonic clock anchored to wall time at start, so a wall clock stepped back
//!   does not move ids back;
//! - the generator starts above the lease's floor and above `ownFloorMs` (every id an earlier
//!   generator of the same handle made), whatever the clock reads;
//! - it issues nothing until `renewed()`, then only timestamps below the floor the renewal
//!   recorded and before its send time + TTL - margin; `stop()` ends issuing for good;
//! - ids strictly increase; a used-up time unit waits (spins) for the next;
//!   `issuedBelowMs()` is above every id made, the floor a release records.
//!
//! The clock is injected (`LocalClock`), so tests step time by hand.

import { IdmintError } from "./errors.js";
import type { Layout } from "./layout.js";

/** Wall (ns since the Unix epoch, may step) and monotonic (ns, never decreasing) time. */
export interface LocalClock {
  wallNs(): bigint;
  monotonicNs(): bigint;
}

/** The process's clocks: `Date.now()` and `process.hrtime`. */
export const SYSTEM_CLOCK: LocalClock = {
  wallNs: () => BigInt(Date.now()) * 1_000_000n,
  monotonicNs: () => process.hrtime.bigint(),
};

/** The lease does not cover the time now (not renewed up to it, or stopped). */
export class LeaseExpiredError extends IdmintError {
  constructor(message: string) {
    super("lease_expired", message);
  }
  override get retryable(): boolean {
    return true;
  }
}

const MS = 1_000_000n;

/** The layout as a lease group records it (the layout lock): the Rust core's text. */
export function lockText(layout: Layout): string {
  const s = layout.spec;
  return (
    `timestamp_bits=${s.timestampBits} node_bits=${s.nodeBits} sequence_bits=${s.sequenceBits} ` +
    `time_unit_ns=${s.unitNanos} epoch_unix_ms=${s.epochUnixMs} order=${s.order} max_bits=${s.maxBits}`
  );
}

function units(layout: Layout, unixNs: bigint): bigint {
  const since = unixNs - layout.spec.epochUnixMs * MS;
  return since > 0n ? since / layout.spec.unitNanos : 0n;
}

function unitStartNs(layout: Layout, ts: bigint): bigint {
  return ts * layout.spec.unitNanos + layout.spec.epochUnixMs * MS;
}

/** No timestamp at or above this: below the recorded floor, before sent + TTL - margin. */
export function limitAfterRenewal(layout: Layout, sentAtNs: bigint, floorMs: bigint, ttlNs: bigint, marginNs: bigint): bigint {
  const floorNs = floorMs * MS - 1n;
  const floorLimit = units(layout, floorNs > 0n ? floorNs : 0n) + 1n;
  const expiry = units(layout, sentAtNs + ttlNs - marginNs);
  return floorLimit < expiry ? floorLimit : expiry;
}

/** One worker id's ids under a lease. */
export class Generator {
  private ts: bigint;
  private seq: number;
  private limit = 0n;
  private readonly base: bigint;
  private readonly offset: bigint;
  private readonly maxSeq: number;
  private readonly maxTs: bigint;
  private readonly tsShift: bigint;
  private readonly seqShift: bigint;
  private readonly nodePart: bigint;

  constructor(
    readonly layout: Layout,
    readonly worker: number,
    floorMs: bigint,
    private readonly clock: LocalClock,
    ownFloorMs = 0n,
  ) {
    const s = layout.spec;
    if (!Number.isSafeInteger(worker) || worker < 0 || worker >= 2 ** s.nodeBits) {
      throw new IdmintError("lease_refused", `worker ${worker} does not fit ${s.nodeBits} bits`);
    }
    this.offset = clock.wallNs() - clock.monotonicNs();
    this.base = this.offset - s.epochUnixMs * MS;
    this.maxSeq = 2 ** s.sequenceBits - 1;
    this.maxTs = (1n << BigInt(s.timestampBits)) - 1n;
    this.tsShift = BigInt(s.nodeBits + s.sequenceBits);
    const sequenceFirst = s.order === "sequence_then_node";
    this.seqShift = sequenceFirst ? BigInt(s.nodeBits) : 0n;
    this.nodePart = sequenceFirst ? BigInt(worker) : BigInt(worker) << BigInt(s.sequenceBits);
    const floorNs = (floorMs > ownFloorMs ? floorMs : ownFloorMs) * MS;
    let first = units(layout, floorNs);
    if (unitStartNs(layout, first) < floorNs) first += 1n;
    // The unit before the first allowed one counts as used up.
    this.ts = first - 1n;
    this.seq = this.maxSeq;
  }

  /** The generator's time, ns since the Unix epoch. */
  nowNs(): bigint {
    return this.clock.monotonicNs() + this.offset;
  }

  renewed(sentAtNs: bigint, floorMs: bigint, ttlNs: bigint, marginNs: bigint): void {
    this.limit = limitAfterRenewal(this.layout, sentAtNs, floorMs, ttlNs, marginNs);
  }

  stop(): void {
    this.limit = 0n;
  }

  issuedBelowMs(): bigint {
    const ns = unitStartNs(this.layout, this.ts + 1n);
    return (ns + MS - 1n) / MS;
  }

  /** The next id; `LeaseExpiredError` when the lease does not cover the time now. */
  next(): bigint {
    let ts = this.ts;
    let seq = this.seq + 1;
    for (;;) {
      const now = (this.clock.monotonicNs() + this.base) / this.layout.spec.unitNanos;
      if (now > ts) {
        ts = now;
        seq = 0;
        break;
      }
      if (seq <= this.maxSeq) break;
    }
    if (ts >= this.limit) throw new LeaseExpiredError("the worker lease does not cover the time now");
    if (ts > this.maxTs) throw new IdmintError("time_exhausted", "the layout's timestamp field ran out");
    this.ts = ts;
    this.seq = seq;
    return (ts << this.tsShift) | (BigInt(seq) << this.seqShift) | this.nodePart;
  }
}

/** How many ms the clock is behind `floorMs` (undefined if not behind). */
export function floorBehind(floorMs: bigint, clock: LocalClock, ownFloorMs = 0n): bigint | undefined {
  let now = clock.wallNs() / MS;
  if (ownFloorMs > now) now = ownFloorMs;
  return now < floorMs ? floorMs - now : undefined;
}
