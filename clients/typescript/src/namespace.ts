//! `Namespace`: a handle on one namespace's ids, typed by how 64-bit ids are given.
//!
//! `tryNext` takes from the cache without waiting (no network, `undefined` when empty);
//! `next` and `nextBatch` wait for a refill when it is empty, at most `refillWaitMs`. Ids
//! increase per namespace per client, so per handle too: one event loop takes them in turn.

import { InvalidCountError } from "./errors.js";
import { SequenceIds } from "./sequence.js";
import type { TimedIds, TimedKind } from "./timed.js";

/** How 64-bit ids are given. */
export type IdType = "bigint" | "string" | "number";

/** The id type of a handle (UUIDv7 and ULID ids are always text). */
export type IdOf<T extends IdType> = T extends "number" ? number | string : T extends "string" ? string : bigint | string;

export interface NamespaceStats {
  kind: "sequence" | TimedKind;
  /** Ids held and not handed out. */
  buffered: number;
  served: number;
  /** Sequence: ids never handed out and never to be (received = served + buffered + burned + givenBack). */
  burned: number;
  givenBack: number;
  /** Time-ordered: ids dropped because their batch was older than the validity window. */
  expired: number;
  refills: number;
  refillFailures: number;
  /** Calls that found the cache empty and waited. */
  waits: number;
  demandPerSec: number;
  /** The next block or batch size. */
  nextFetch: number;
  lastError: string | undefined;
}

export function statsOf(ids: SequenceIds | TimedIds): NamespaceStats {
  if (ids instanceof SequenceIds) {
    const s = ids.buffer.stats();
    return {
      kind: "sequence",
      buffered: s.buffered,
      served: s.served,
      burned: s.burned,
      givenBack: s.givenBack,
      expired: 0,
      refills: s.refills,
      refillFailures: ids.refillFailures,
      waits: ids.waits,
      demandPerSec: ids.buffer.demandPerSec,
      nextFetch: ids.buffer.targetBlock(),
      lastError: ids.lastError?.message,
    };
  }
  return {
    kind: ids.kind,
    buffered: ids.buffered,
    served: ids.served,
    burned: 0,
    givenBack: 0,
    expired: ids.expired,
    refills: ids.refills,
    refillFailures: ids.refillFailures,
    waits: ids.waits,
    demandPerSec: 0,
    nextFetch: ids.nextFetch,
    lastError: ids.lastError?.message,
  };
}

function converter(type: "string" | "number"): (id: bigint | string) => bigint | string | number {
  switch (type) {
    case "string":
      return (id) => (typeof id === "bigint" ? id.toString() : id);
    case "number":
      return (id) => (typeof id === "bigint" ? Number(id) : id);
  }
}

export class Namespace<T extends IdType = "bigint"> {
  readonly kind: "sequence" | TimedKind;
  /** Where `tryNext` takes from: the block buffer itself for a sequence (the hot path). */
  private readonly source: { take(): bigint | string | undefined };
  /** How an id is given: `undefined` for bigint, as it comes. */
  private readonly convert: ((id: bigint | string) => bigint | string | number) | undefined;

  constructor(
    readonly name: string,
    readonly idType: T,
    private readonly ids: SequenceIds | TimedIds,
  ) {
    this.kind = ids instanceof SequenceIds ? "sequence" : ids.kind;
    this.source = ids instanceof SequenceIds ? ids.buffer : ids;
    this.convert = idType === "bigint" ? undefined : converter(idType);
  }

  /** The next id without waiting (no network), or `undefined` when the cache is empty. */
  tryNext(): IdOf<T> | undefined {
    const id = this.source.take();
    return (this.convert === undefined || id === undefined ? id : this.convert(id)) as IdOf<T> | undefined;
  }

  /** The next id, waiting for a refill when the cache is empty. */
  async next(): Promise<IdOf<T>> {
    const id = await this.ids.next();
    return (this.convert === undefined ? id : this.convert(id)) as IdOf<T>;
  }

  /** `count` increasing ids. */
  async nextBatch(count: number): Promise<IdOf<T>[]> {
    if (!Number.isSafeInteger(count) || count < 1) {
      throw new InvalidCountError("invalid_count", `count must be a whole number from 1, got ${count}`);
    }
    const ids = await this.ids.nextBatch(count);
    const convert = this.convert;
    return (convert === undefined ? ids : ids.map(convert)) as IdOf<T>[];
  }

  stats(): NamespaceStats {
    return statsOf(this.ids);
  }
}
