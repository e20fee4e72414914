//! A node over gRPC (`@grpc/grpc-js`): `grpc://host:port` (plain HTTP/2) or `grpcs://host:port`
//! (TLS, trusting the configured CA or the public roots, presenting the client certificate if
//! given). Every call carries the bearer token and a deadline.
//!
//! Errors: a status with an `idmint-error-code` trailer is that code's class; a status without
//! one (the connection failed, TLS was refused, the deadline passed) is `UnavailableError`
//! keeping the gRPC status, so the fallback policy (`nodes.ts`) can move on.

import * as grpc from "@grpc/grpc-js";
import { IdmintError, ProtocolError } from "./errors.js";
import { fromGrpc } from "./wire_errors.js";
import type { RouteFields } from "./shard.js";
import { idmintService } from "./proto.js";
import { ulidText, uuidText } from "./decode.js";
import {
  bytesToBigInt,
  type Credentials,
  type GiveBackAnswer,
  type IdsAnswer,
  type LeasedBlock,
  type NamespaceDescription,
  type NamespaceInfo,
  type RemoteDecoded,
  type Transport,
} from "./transport.js";

type Callback = (err: grpc.ServiceError | null, answer?: unknown) => void;
type Method = (request: object, metadata: grpc.Metadata, options: grpc.CallOptions, cb: Callback) => void;

const U64 = (text: unknown): bigint => {
  if (typeof text !== "string" || !/^[0-9]+$/.test(text)) throw new ProtocolError(`expected a 64-bit integer, got ${String(text)}`);
  return BigInt(text);
};

export class GrpcTransport implements Transport {
  private readonly client: grpc.Client;
  private readonly metadata: grpc.Metadata;

  constructor(
    readonly label: string,
    address: string,
    tls: boolean,
    creds: Credentials,
  ) {
    const channel = tls
      ? grpc.credentials.createSsl(creds.ca ?? null, creds.key ?? null, creds.cert ?? null)
      : grpc.credentials.createInsecure();
    const Service = idmintService();
    this.client = new Service(address, channel, {
      // One connection per node, not shared with other clients of the process.
      "grpc.use_local_subchannel_pool": 1,
      "grpc.initial_reconnect_backoff_ms": 100,
      "grpc.max_reconnect_backoff_ms": 2000,
    });
    this.metadata = new grpc.Metadata();
    if (creds.token !== undefined) this.metadata.set("authorization", `Bearer ${creds.token}`);
  }

  private call<T>(method: string, request: object, timeoutMs: number): Promise<T> {
    const fn = (this.client as unknown as Record<string, Method>)[method];
    if (fn === undefined) return Promise.reject(new ProtocolError(`no method ${method}`));
    return new Promise((resolve, reject) => {
      fn.call(this.client, request, this.metadata, { deadline: Date.now() + timeoutMs }, (err, answer) => {
        if (err !== null) reject(this.error(err));
        else resolve(answer as T);
      });
    });
  }

  private error(err: grpc.ServiceError): IdmintError {
    const code = err.metadata?.get("idmint-error-code")[0];
    return fromGrpc({ code: err.code, details: err.details, idmintCode: typeof code === "string" ? code : undefined }, this.label);
  }

  async next(namespace: string, count: number, timeoutMs: number, route?: RouteFields): Promise<IdsAnswer> {
    const a = await this.call<{ ids?: string; u64?: { ids: string[] }; uuid7?: { ids: Buffer[] }; ulid?: { ids: Buffer[] } }>(
      "Next",
      { namespace, count: String(count), ...route },
      timeoutMs,
    );
    switch (a.ids) {
      case "u64":
        return { kind: "u64", ids: (a.u64?.ids ?? []).map(U64) };
      case "uuid7":
        return { kind: "uuid7", ids: (a.uuid7?.ids ?? []).map((b) => uuidText(bytes16(b))) };
      case "ulid":
        return { kind: "ulid", ids: (a.ulid?.ids ?? []).map((b) => ulidText(bytes16(b))) };
      default:
        throw new ProtocolError(`${this.label}: an answer without ids`);
    }
  }

  async block(namespace: string, count: number, timeoutMs: number, minStart?: bigint, extends_?: bigint): Promise<LeasedBlock> {
    const request: Record<string, string> = { namespace, count: String(count) };
    if (minStart !== undefined) request.min_start = minStart.toString();
    if (extends_ !== undefined && extends_ !== 0n) request.extends = extends_.toString();
    const b = await this.call<{ start: string; end: string; step: string; lease: string; lease_start?: string }>(
      "Block",
      request,
      timeoutMs,
    );
    return {
      start: U64(b.start),
      end: U64(b.end),
      step: U64(b.step),
      lease: U64(b.lease),
      leaseStart: b.lease_start === undefined ? 0n : U64(b.lease_start),
    };
  }

  async giveBack(namespace: string, tail: LeasedBlock, timeoutMs: number): Promise<GiveBackAnswer> {
    const a = await this.call<{ given_back: boolean; ids: string; reason: string }>(
      "GiveBack",
      {
        namespace,
        start: tail.start.toString(),
        end: tail.end.toString(),
        step: tail.step.toString(),
        lease: tail.lease.toString(),
      },
      timeoutMs,
    );
    return { givenBack: a.given_back, ids: U64(a.ids), reason: a.reason };
  }

  async describe(namespace: string, timeoutMs: number): Promise<NamespaceDescription | null> {
    let info: {
      kind?: string;
      sequence?: { settings?: { width: number; step: string; offset: string; residues: string[] } };
      snowflake?: { layout?: { timestamp_bits: number; node_bits: number; sequence_bits: number } };
    };
    try {
      info = await this.call("Namespace", { namespace }, timeoutMs);
    } catch (e) {
      if (e instanceof IdmintError && e.code === "unknown_namespace") return null;
      throw e;
    }
    switch (info.kind) {
      case "sequence": {
        const s = info.sequence?.settings;
        if (s === undefined) throw new ProtocolError(`${this.label}: a sequence namespace without settings`);
        const residues = s.residues.length > 0 ? s.residues.map(U64) : [U64(s.offset)];
        return { kind: "sequence", width: s.width, step: U64(s.step), residues };
      }
      case "snowflake": {
        const l = info.snowflake?.layout;
        if (l === undefined) throw new ProtocolError(`${this.label}: a snowflake namespace without a layout`);
        return { kind: "snowflake", totalBits: l.timestamp_bits + l.node_bits + l.sequence_bits };
      }
      case "uuid7":
      case "ulid":
        return { kind: info.kind };
      default:
        throw new ProtocolError(`${this.label}: a namespace of a kind this client does not know`);
    }
  }

  async info(namespace: string, timeoutMs: number): Promise<NamespaceInfo> {
    const a = await this.call<Record<string, unknown> & { kind?: string }>("Namespace", { namespace }, timeoutMs);
    if (typeof a.kind !== "string") throw new ProtocolError(`${this.label}: a namespace of no kind`);
    const inner = a[a.kind];
    return { namespace, ...(typeof inner === "object" && inner !== null ? inner : {}), kind: a.kind };
  }

  async decode(namespace: string, id: string, timeoutMs: number): Promise<RemoteDecoded> {
    const a = await this.call<Record<string, unknown> & { kind?: string }>("Decode", { namespace, id }, timeoutMs);
    const kind = a.kind;
    const d = (kind === undefined ? undefined : a[kind]) as Record<string, unknown> | undefined;
    if (kind === undefined || d === undefined) throw new ProtocolError(`${this.label}: a decoded id of no kind`);
    switch (kind) {
      case "sequence":
        return {
          namespace,
          kind,
          id: String(U64(d.id)),
          in_namespace: d.in_namespace,
          issued: d.issued,
          // 0 from a node older than these fields: left out, as HTTP leaves them out.
          ...(U64(d.step) > 0n ? { step: Number(U64(d.step)), residue: Number(U64(d.residue)) } : {}),
          // Unset with a single authority, or when no member owns the class.
          ...(typeof d.member === "number" ? { member: d.member } : {}),
        };
      case "snowflake": {
        // The node field is named by the namespace's layout (the `node` oneof): `shard` for
        // the instagram layout, `worker` for every other, as the HTTP answer names it.
        const field = d.node === "shard" ? "shard" : "worker";
        return {
          namespace,
          kind,
          id: String(U64(d.id)),
          timestamp: d.timestamp,
          unix_ms: Number(U64(d.unix_ms)),
          [field]: Number(U64(d[field])),
          sequence: Number(U64(d.sequence)),
        };
      }
      default:
        return {
          namespace,
          kind,
          id: String(d.id),
          timestamp: typeof d.timestamp === "string" ? d.timestamp : null,
          unix_ms: Number(U64(d.unix_ms)),
        };
    }
  }

  /** A worker-lease call (`AcquireWorker`, `RenewWorker`, `ReleaseWorker`) with its raw answer (`local_snowflake.ts`). */
  leaseCall(method: "AcquireWorker" | "RenewWorker" | "ReleaseWorker", request: object, timeoutMs: number): Promise<unknown> {
    return this.call(method, request, timeoutMs);
  }

  close(): void {
    this.client.close();
  }
}

function bytes16(b: Uint8Array): bigint {
  if (b.length !== 16) throw new ProtocolError(`a 128-bit id of ${b.length} bytes`);
  return bytesToBigInt(b);
}
