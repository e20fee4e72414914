//! A node over HTTP/JSON (docs/api.md) with `fetch` (undici's, so a private CA and a client
//! certificate can be given): `http://host:port` or `https://host:port`. The fallback wire for
//! nodes (or networks) without gRPC; the same operations, the same codes.
//!
//! Ids arrive as decimal strings and become `bigint`s; JSON numbers are read only where the API
//! sends small ones (`step`, `width`), and checked to be safe integers.

import { Agent, fetch } from "undici";
import { IdmintError, ProtocolError, UnavailableError } from "./errors.js";
import { fromHttp } from "./wire_errors.js";
import { idsQuery, type RouteFields } from "./shard.js";
import type {
  Credentials,
  GiveBackAnswer,
  IdsAnswer,
  LeasedBlock,
  NamespaceDescription,
  NamespaceInfo,
  RemoteDecoded,
  Transport,
} from "./transport.js";

const DECIMAL = /^[0-9]{1,20}$/;

function u64(v: unknown, what: string): bigint {
  if (typeof v === "string" && DECIMAL.test(v)) return BigInt(v);
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  throw new ProtocolError(`${what}: expected a 64-bit integer, got ${JSON.stringify(v)}`);
}

export class HttpTransport implements Transport {
  private readonly base: string;
  private readonly agent: Agent;
  private readonly headers: Record<string, string>;

  constructor(
    readonly label: string,
    url: URL,
    creds: Credentials,
  ) {
    this.base = `${url.protocol}//${url.host}`;
    this.agent = new Agent({
      connect: { ca: creds.ca, cert: creds.cert, key: creds.key },
      keepAliveTimeout: 30_000,
    });
    this.headers = { accept: "application/json" };
    if (creds.token !== undefined) this.headers.authorization = `Bearer ${creds.token}`;
  }

  private async request(method: "GET" | "POST", path: string, timeoutMs: number): Promise<Record<string, unknown>> {
    let response;
    let text;
    try {
      response = await fetch(this.base + path, {
        method,
        headers: this.headers,
        dispatcher: this.agent,
        signal: AbortSignal.timeout(timeoutMs),
      });
      text = await response.text();
    } catch (e) {
      const cause = e instanceof Error ? describe(e) : String(e);
      throw new UnavailableError(`${this.label}: ${cause}`, { node: this.label });
    }
    if (!response.ok) throw fromHttp(response.status, text, this.label);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if (typeof body !== "object" || body === null) {
      throw new ProtocolError(`${this.label}: an answer that is not JSON`, { node: this.label, httpStatus: response.status });
    }
    return body as Record<string, unknown>;
  }

  async next(namespace: string, count: number, timeoutMs: number, route?: RouteFields): Promise<IdsAnswer> {
    const body = await this.request("GET", `/v1/ids/${encodeURIComponent(namespace)}?${idsQuery(count, route)}`, timeoutMs);
    const ids = body.ids;
    if (!Array.isArray(ids) || ids.some((id) => typeof id !== "string")) {
      throw new ProtocolError(`${this.label}: an answer without ids`);
    }
    const texts = ids as string[];
    const first = texts[0] ?? "";
    if (DECIMAL.test(first)) return { kind: "u64", ids: texts.map((t) => u64(t, "id")) };
    if (first.length === 36) return { kind: "uuid7", ids: texts };
    if (first.length === 26) return { kind: "ulid", ids: texts };
    throw new ProtocolError(`${this.label}: ids of an unknown form`);
  }

  async block(namespace: string, count: number, timeoutMs: number, _minStart?: bigint, extends_?: bigint): Promise<LeasedBlock> {
    const q = `count=${count}` + (extends_ ? `&extends=${extends_}` : "");
    const b = await this.request("POST", `/v1/blocks/${encodeURIComponent(namespace)}?${q}`, timeoutMs);
    return {
      start: u64(b.start, "start"),
      end: u64(b.end, "end"),
      step: u64(b.step, "step"),
      lease: b.lease === undefined ? 0n : u64(b.lease, "lease"),
      leaseStart: b.lease_start === undefined ? 0n : u64(b.lease_start, "lease_start"),
    };
  }

  async giveBack(namespace: string, tail: LeasedBlock, timeoutMs: number): Promise<GiveBackAnswer> {
    const q = `lease=${tail.lease}&start=${tail.start}&end=${tail.end}&step=${tail.step}`;
    const a = await this.request("POST", `/v1/blocks/${encodeURIComponent(namespace)}/give-back?${q}`, timeoutMs);
    return { givenBack: a.given_back === true, ids: u64(a.ids, "ids"), reason: String(a.reason ?? "") };
  }

  async describe(namespace: string, timeoutMs: number): Promise<NamespaceDescription | null> {
    let info: Record<string, unknown>;
    try {
      info = await this.request("GET", `/v1/namespaces/${encodeURIComponent(namespace)}`, timeoutMs);
    } catch (e) {
      if (e instanceof IdmintError && e.code === "unknown_namespace") return null;
      throw e;
    }
    switch (info.kind) {
      case "sequence": {
        const s = info.settings as { width?: unknown; step?: unknown; offset?: unknown; residues?: unknown[] } | undefined;
        if (s === undefined || typeof s.width !== "number") throw new ProtocolError(`${this.label}: a sequence namespace without settings`);
        const residues = Array.isArray(s.residues) && s.residues.length > 0 ? s.residues.map((r) => u64(r, "residue")) : [u64(s.offset, "offset")];
        return { kind: "sequence", width: s.width, step: u64(s.step, "step"), residues };
      }
      case "snowflake": {
        const l = (info.settings as { layout?: Record<string, unknown> } | undefined)?.layout;
        const bits = [l?.timestamp_bits, l?.node_bits, l?.sequence_bits];
        if (!bits.every((b) => typeof b === "number")) throw new ProtocolError(`${this.label}: a snowflake namespace without a layout`);
        return { kind: "snowflake", totalBits: (bits as number[]).reduce((a, b) => a + b, 0) };
      }
      case "uuid7":
      case "ulid":
        return { kind: info.kind };
      default:
        throw new ProtocolError(`${this.label}: a namespace of a kind this client does not know`);
    }
  }

  async info(namespace: string, timeoutMs: number): Promise<NamespaceInfo> {
    const a = await this.request("GET", `/v1/namespaces/${encodeURIComponent(namespace)}`, timeoutMs);
    if (typeof a.kind !== "string") throw new ProtocolError(`${this.label}: a namespace of no kind`);
    return { ...a, namespace: String(a.namespace ?? namespace), kind: a.kind };
  }

  async decode(namespace: string, id: string, timeoutMs: number): Promise<RemoteDecoded> {
    const path = `/v1/decode/${encodeURIComponent(namespace)}/${encodeURIComponent(id)}`;
    const a = await this.request("GET", path, timeoutMs);
    if (typeof a.kind !== "string" || typeof a.id !== "string") throw new ProtocolError(`${this.label}: a decoded id of no kind`);
    return { ...a, namespace: String(a.namespace ?? namespace), kind: a.kind, id: a.id };
  }

  close(): void {
    this.agent.close().catch(() => undefined);
  }
}

/** An error and its causes, one line (fetch's "fetch failed" says why only in its cause). */
function describe(e: Error): string {
  const parts = [e.message];
  let cause: unknown = e.cause;
  while (cause instanceof Error && parts.length < 4) {
    parts.push(cause.message);
    cause = cause.cause;
  }
  return parts.join(": ");
}
