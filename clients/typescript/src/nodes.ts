//! The nodes a client talks to, and the one fallback policy across them (docs/client.md,
//! "Several nodes"): a call goes to the node that answered last; when it fails in a way another
//! node may not (no answer, a connection or TLS failure, UNAVAILABLE, DEADLINE_EXCEEDED,
//! CANCELLED, ABORTED, INTERNAL, UNKNOWN; over HTTP a 503, a 500 `internal_error`, or an answer
//! that is not idmint's), the next node is tried, each at most once per call. So a `Block`
//! whose answer was lost is never sent again to the node that may have granted it: those ids
//! are burned there, never served twice.
//!
//! Urls: `http://host:port` or `https://host:port` (TLS), over the client's transport (gRPC
//! unless `transport: "http"`); an entry `{ url, transport }` picks its own, so a list may mix
//! them: `["http://a:7879", { url: "http://a:7878", transport: "http" }]` is a node over gRPC
//! with its HTTP/JSON API as the fallback.
//!
//! When every node fails, the error is the last one a node answered with a code (an
//! `authority_unavailable` from the only node is that, not a bare "unavailable"), else
//! `UnavailableError` naming each failure.

import { IdmintError, InvalidConfigError, UnavailableError } from "./errors.js";
import { GrpcTransport } from "./grpc.js";
import { HttpTransport } from "./http.js";
import type { Credentials, Transport } from "./transport.js";

/** gRPC status codes after which another node is tried. */
const MOVES_ON_GRPC = new Set([1 /* CANCELLED */, 2 /* UNKNOWN */, 4 /* DEADLINE_EXCEEDED */, 10 /* ABORTED */, 13 /* INTERNAL */, 14 /* UNAVAILABLE */]);

/** Whether a failed call may succeed on another node. */
export function movesOn(e: unknown): boolean {
  if (!(e instanceof IdmintError)) return false;
  if (e instanceof UnavailableError) return true;
  if (e.grpcStatus !== undefined) return MOVES_ON_GRPC.has(e.grpcStatus);
  if (e.httpStatus !== undefined) return e.httpStatus === 503 || (e.httpStatus === 500 && e.code === "internal_error");
  return false;
}

export type TransportKind = "grpc" | "http";

/** A node's url, with the transport to reach it by when not the client's. */
export type NodeUrl = string | { url: string; transport?: TransportKind };

/** One transport per url, labelled by position. */
export function transports(urls: readonly NodeUrl[], transport: TransportKind, creds: Credentials): Transport[] {
  if (urls.length === 0) throw new InvalidConfigError("at least one node url is needed");
  return urls.map((entry, i) => {
    const label = `node #${i + 1}`;
    const text = typeof entry === "string" ? entry : entry.url;
    const kind = (typeof entry === "string" ? undefined : entry.transport) ?? transport;
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      throw new InvalidConfigError(`the url of ${label} is not a valid url`);
    }
    if (url.port === "" || url.hostname === "") throw new InvalidConfigError(`the url of ${label} needs a host and a port`);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new InvalidConfigError(`the url of ${label} is not http:// or https://`);
    }
    switch (kind) {
      case "grpc":
        return new GrpcTransport(label, url.host, url.protocol === "https:", creds);
      case "http":
        return new HttpTransport(label, url, creds);
      default:
        throw new InvalidConfigError(`the transport of ${label} is not grpc or http`);
    }
  });
}

export class Nodes {
  /** The node that answered last: calls start there. */
  private current = 0;

  constructor(
    readonly list: readonly Transport[],
    readonly timeoutMs: number,
  ) {}

  /** The nodes a call tries, in order: from the current one on; with `first` (a shard's holder), that node, then the others from the current one on. */
  order(first?: number): number[] {
    const n = this.list.length;
    const usual = Array.from({ length: n }, (_, i) => (this.current + i) % n);
    if (first === undefined || first < 0 || first >= n) return usual;
    return [first, ...usual.filter((i) => i !== first)];
  }

  /**
   * Runs `op` on the nodes in turn from the current one; answers with the node's index. With
   * `first` (a shard's holder, from the shard map), that node is tried first, and the usual
   * order is left as it was when it answers.
   */
  async call<T>(op: (t: Transport) => Promise<T>, first?: number): Promise<{ node: number; answer: T }> {
    const failures: string[] = [];
    let answered: IdmintError | undefined;
    for (const index of this.order(first)) {
      try {
        const answer = await this.callOne(index, op);
        if (index !== first) this.current = index;
        return { node: index, answer };
      } catch (e) {
        if (!movesOn(e)) throw e;
        if (!(e instanceof UnavailableError)) answered = e as IdmintError;
        failures.push(e instanceof UnavailableError ? e.message : `${(e as IdmintError).node}: ${(e as Error).message}`);
      }
    }
    throw answered ?? new UnavailableError(`no node answered: ${failures.join("; ")}`);
  }

  /** Runs `op` on node `index` alone (a give-back goes to the node that leased the block). */
  async callOne<T>(index: number, op: (t: Transport) => Promise<T>): Promise<T> {
    const t = this.list[index];
    if (t === undefined) throw new UnavailableError(`no node #${index + 1}`);
    return op(t);
  }

  close(): void {
    for (const t of this.list) t.close();
  }
}
