//! What the client asks of one node, whatever the wire: gRPC (`grpc.ts`) or HTTP/JSON over
//! `fetch` (`http.ts`). Every 64-bit value is a `bigint`; 128-bit ids are canonical text.
//!
//! Invariant: a transport throws only `IdmintError`s: a `NodeError` subclass for an answer
//! with a code, `UnavailableError` when no answer came (connection refused, TLS refused, no
//! answer within the deadline), `ProtocolError` for an answer that breaks the protocol.

import type { RouteFields } from "./shard.js";

/** One contiguous block `[start, end)` with `step`, and the lease its tail goes back with. */
export interface LeasedBlock {
  start: bigint;
  end: bigint;
  step: bigint;
  /** 0 when the tail can never go back. */
  lease: bigint;
  /**
   * The first id the lease covers: below `start` when the block joined the lease the request
   * extended; 0 (or absent) from nodes that do not join leases: read it as `start`.
   */
  leaseStart?: bigint;
}

/** Ids of one `Next` answer, strictly increasing. */
export type IdsAnswer = { kind: "u64"; ids: bigint[] } | { kind: "uuid7" | "ulid"; ids: string[] };

export interface GiveBackAnswer {
  givenBack: boolean;
  ids: bigint;
  reason: string;
}

/** What the client needs to know of a namespace. */
export type NamespaceDescription =
  | {
      kind: "sequence";
      width: number;
      step: bigint;
      /** The residue classes the node's authority may grant (the offset alone if it said none). */
      residues: bigint[];
    }
  | { kind: "snowflake"; totalBits: number }
  | { kind: "uuid7" }
  | { kind: "ulid" };

/** A namespace's settings and state as the node describes them (`kind` names it; the other
 * fields are the wire's: the HTTP detail, or the gRPC message's fields of that kind). */
export interface NamespaceInfo {
  namespace: string;
  kind: string;
  [field: string]: unknown;
}

/** What a node says an id of one of its namespaces is (the HTTP API's shape on both wires). */
export interface RemoteDecoded {
  namespace: string;
  kind: string;
  /** Decimal for 64-bit ids, canonical text for UUIDv7 and ULID. */
  id: string;
  [field: string]: unknown;
}

/** One node over one wire. */
export interface Transport {
  /** `node #1`, `node #2`...: never the url, which may hold a secret. */
  readonly label: string;
  /** `route`: the shard the ids are of (a snowflake namespace with `shards = "owned"`). */
  next(namespace: string, count: number, timeoutMs: number, route?: RouteFields): Promise<IdsAnswer>;
  /** `minStart`: the client's floor (gRPC only; over HTTP the client cuts what lies below). */
  /** `extends`: the caller's newest lease from this node, which the block may join. */
  block(namespace: string, count: number, timeoutMs: number, minStart?: bigint, extends_?: bigint): Promise<LeasedBlock>;
  giveBack(namespace: string, tail: LeasedBlock, timeoutMs: number): Promise<GiveBackAnswer>;
  /** The namespace, or `null` when the node answers `unknown_namespace`. */
  describe(namespace: string, timeoutMs: number): Promise<NamespaceDescription | null>;
  info(namespace: string, timeoutMs: number): Promise<NamespaceInfo>;
  decode(namespace: string, id: string, timeoutMs: number): Promise<RemoteDecoded>;
  close(): void;
}

/** How to reach nodes: a bearer token and TLS material, shared by every transport. */
export interface Credentials {
  token?: string | undefined;
  /** PEM of the CA to trust (only that one); default: the public roots. */
  ca?: Buffer | undefined;
  /** PEM certificate and key presented to nodes that require client certificates. */
  cert?: Buffer | undefined;
  key?: Buffer | undefined;
}

/** The 128 bits of 16 big-endian bytes. */
export function bytesToBigInt(bytes: Uint8Array): bigint {
  let v = 0n;
  for (const b of bytes) v = (v << 8n) | BigInt(b);
  return v;
}
