//! Typed handles: one per namespace kind, so that an id's static type follows the kind.
//!
//! `client.sequence(name)` and `client.snowflake(name)` give `Ids<bigint>`, `client.uuid7(name)`
//! and `client.ulid(name)` `Ids<string>`. Making a handle costs nothing; its first use sets the
//! namespace up (as `client.namespace`) and checks the kind the node describes: a handle of
//! another kind throws `WrongKindError` (and a snowflake, UUIDv7 or ULID handle of a namespace
//! the node does not have throws `UnknownNamespaceError` without creating it; a sequence handle
//! creates it as `next` does, with the node's `auto_create`). The untyped `client.next(name)`
//! stays, typed `bigint | string`.

import { InvalidCountError } from "./errors.js";
import type { Namespace, NamespaceStats } from "./namespace.js";

/** A namespace kind. */
export type Kind = "sequence" | "snowflake" | "uuid7" | "ulid";

/** The id type of a kind's typed handle: `bigint` for 64-bit ids, text for UUIDv7 and ULID. */
export type IdOfKind<K extends Kind> = K extends "sequence" | "snowflake" ? bigint : string;

/** A typed handle of one namespace (see the module docs). Ids increase per namespace per client. */
export class Ids<T extends bigint | string> {
  private handle: Namespace<"bigint"> | undefined;

  /** @internal `setUp` sets the namespace up and checks its kind (the client's). */
  constructor(
    readonly name: string,
    readonly kind: Kind,
    private readonly setUp: () => Promise<Namespace<"bigint">>,
  ) {}

  /** The untyped handle, set up and kind-checked on first use. */
  async namespace(): Promise<Namespace<"bigint">> {
    this.handle ??= await this.setUp();
    return this.handle;
  }

  /** The next id without waiting (no network), or `undefined` when none is held (or before first use). */
  tryNext(): T | undefined {
    return this.handle?.tryNext() as T | undefined;
  }

  /** The next id, waiting for a refill when the cache is empty. */
  async next(): Promise<T> {
    const h = this.handle ?? (await this.namespace());
    return (h.tryNext() ?? (await h.next())) as T;
  }

  /** `count` increasing ids. */
  async nextBatch(count: number): Promise<T[]> {
    if (!Number.isSafeInteger(count) || count < 1) {
      throw new InvalidCountError("invalid_count", `count must be a whole number from 1, got ${count}`);
    }
    return (await (this.handle ?? (await this.namespace())).nextBatch(count)) as T[];
  }

  /** The namespace's counters on this client; `undefined` before first use. */
  stats(): NamespaceStats | undefined {
    return this.handle?.stats();
  }
}
