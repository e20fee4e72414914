//! A snowflake, UUIDv7 or ULID namespace's ids in the client: batches fetched with `Next`,
//! handed out only while they are fresh.
//!
//! Invariants (docs/client.md, "Snowflake, UUIDv7 and ULID namespaces"):
//! - only ids a node returned are handed out, each once, in increasing order: an id not above
//!   every id the client held of the namespace (another node's, after a failover) is dropped;
//! - validity: each batch is stamped with the monotonic clock read before its request was
//!   sent, and its ids are handed out only while `now <= stamp + validity`; older ones are
//!   dropped and counted as expired;
//! - batch size starts at 16 and doubles (up to `maxBatch`) each time a batch was used up with
//!   nothing expiring, and halves when ids expired; a batch is fetched ahead when fewer than
//!   half a batch of fresh ids remain, at most one `Next` in flight.
//!
//! Ids are compared as `bigint` (snowflake) or as canonical text (UUIDv7 lowercase hex, ULID
//! uppercase Crockford base32: fixed length, so text order is numeric order).

import { ClosedError, IdmintError, ProtocolError, UnavailableError } from "./errors.js";
import type { Nodes } from "./nodes.js";

export type TimedKind = "snowflake" | "uuid7" | "ulid";
type TimedId = bigint | string;

export interface TimedSettings {
  validityMs: number;
  maxBatch: number;
  timeoutMs: number;
  refillWaitMs: number;
  /** The monotonic clock, ms (injectable for tests). */
  now: () => number;
}

const FIRST_BATCH = 16;
const RETRY_PAUSE_MS = 50;

interface Batch {
  stamp: number;
  ids: TimedId[];
  /** The next unused index. */
  at: number;
}

export class TimedIds {
  private readonly batches: Batch[] = [];
  private cached = 0;
  private highest: TimedId | undefined;
  private batch = FIRST_BATCH;
  private expiredSinceFetch = false;
  private inflight: Promise<void> | undefined;
  private closed = false;
  served = 0;
  expired = 0;
  dropped = 0;
  refills = 0;
  refillFailures = 0;
  waits = 0;
  lastError: IdmintError | undefined;

  constructor(
    readonly name: string,
    readonly kind: TimedKind,
    private readonly nodes: Nodes,
    private readonly settings: TimedSettings,
  ) {}

  /** Drops the batches older than the validity window. */
  private expire(now: number): void {
    while (this.batches.length > 0) {
      const b = this.batches[0] as Batch;
      if (now <= b.stamp + this.settings.validityMs && b.at < b.ids.length) return;
      const unused = b.ids.length - b.at;
      if (unused > 0) {
        this.expired += unused;
        this.expiredSinceFetch = true;
      }
      this.cached -= unused;
      this.batches.shift();
    }
  }

  /** The next fresh id without waiting, or `undefined`. */
  tryNext(): TimedId | undefined {
    if (this.closed) return undefined;
    this.expire(this.settings.now());
    const b = this.batches[0];
    let id: TimedId | undefined;
    if (b !== undefined) {
      id = b.ids[b.at++];
      this.cached--;
      this.served++;
    }
    if (this.cached < Math.max(1, this.batch >> 1)) this.fetch();
    return id;
  }

  /** `tryNext`, by the name the block buffer's hot path has. */
  take(): TimedId | undefined {
    return this.tryNext();
  }

  async next(): Promise<TimedId> {
    const id = this.tryNext();
    if (id !== undefined) return id;
    const [first] = await this.wait(1);
    return first as TimedId;
  }

  async nextBatch(count: number): Promise<TimedId[]> {
    const out: TimedId[] = [];
    while (out.length < count) {
      const id = this.tryNext();
      if (id === undefined) break;
      out.push(id);
    }
    if (out.length === count) return out;
    for (const id of await this.wait(count - out.length)) out.push(id);
    return out;
  }

  private async wait(count: number): Promise<TimedId[]> {
    this.waits++;
    const deadline = performance.now() + this.settings.refillWaitMs;
    const out: TimedId[] = [];
    for (;;) {
      if (this.closed) throw new ClosedError();
      this.fetch(Math.min(this.settings.maxBatch, Math.max(this.batch, count - out.length)));
      const pending = this.inflight;
      let error: IdmintError | undefined;
      if (pending !== undefined) {
        await pending;
        error = this.lastErrorOfLastFetch;
      }
      while (out.length < count) {
        const id = this.tryNext();
        if (id === undefined) break;
        out.push(id);
      }
      if (out.length === count) return out;
      // A node's answer (forbidden, rate_limited...) at once; "no node answered" is waited out.
      if (error !== undefined && !(error instanceof UnavailableError)) throw error;
      const left = deadline - performance.now();
      if (left <= 0) {
        throw error ?? new UnavailableError(`${this.name}: no fresh ids within ${this.settings.refillWaitMs} ms`);
      }
      // Every node failed: pause before the next round (a retry, not an ordering of events).
      if (error !== undefined) await new Promise((resolve) => setTimeout(resolve, Math.min(left, RETRY_PAUSE_MS)));
    }
  }

  private lastErrorOfLastFetch: IdmintError | undefined;

  /** Starts a `Next` of the next batch's size (or `size`) unless one is in flight. */
  private fetch(size?: number): void {
    if (this.inflight !== undefined || this.closed) return;
    if (size === undefined) {
      // From how the last batch went: expiries halve it, a batch used up doubles it.
      this.batch = this.expiredSinceFetch
        ? Math.max(1, this.batch >> 1)
        : Math.min(this.settings.maxBatch, this.refills === 0 ? this.batch : this.batch * 2);
    }
    this.expiredSinceFetch = false;
    const count = size ?? this.batch;
    const stamp = this.settings.now();
    this.lastErrorOfLastFetch = undefined;
    this.inflight = this.nodes
      .call((t) => t.next(this.name, count, this.settings.timeoutMs))
      .then(
        ({ answer }) => {
          const ids: TimedId[] = [];
          const want = this.kind === "snowflake" ? "u64" : this.kind;
          if (answer.kind !== want) throw new ProtocolError(`${this.name}: the node sent ${answer.kind} ids for a ${this.kind} namespace`);
          for (const id of answer.ids) {
            if (this.highest !== undefined && id <= this.highest) {
              this.dropped++;
              continue;
            }
            this.highest = id;
            ids.push(id);
          }
          this.refills++;
          if (!this.closed && ids.length > 0) {
            this.batches.push({ stamp, ids, at: 0 });
            this.cached += ids.length;
          }
        },
      )
      .catch((e: unknown) => {
        this.refillFailures++;
        const error = e instanceof IdmintError ? e : new UnavailableError(String(e));
        this.lastError = error;
        this.lastErrorOfLastFetch = error;
      })
      .finally(() => {
        this.inflight = undefined;
      });
  }

  get buffered(): number {
    return this.cached;
  }

  get nextFetch(): number {
    return this.batch;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.inflight !== undefined) await this.inflight;
    this.batches.length = 0;
    this.cached = 0;
  }
}
