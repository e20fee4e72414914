//! How an answer on the wire becomes a typed error: a gRPC status with its `idmint-error-code`
//! trailer, or an HTTP answer with its `{"error": {"code", "message"}}` body. The one place for
//! both wires (docs/grpc.md, "Status codes"; docs/api.md).
//!
//! A status or answer without an idmint code (the connection failed, TLS was refused, the
//! deadline passed, a proxy answered) is `UnavailableError`, so the fallback moves on.

import { errorFor, type IdmintError, UnavailableError } from "./errors.js";

/** gRPC status names by number (the specification's). */
const GRPC_NAMES = [
  "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
  "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
];

/** The number of a gRPC status name (`UNAVAILABLE` → 14). */
export function grpcStatusNumber(name: string): number {
  const n = GRPC_NAMES.indexOf(name);
  if (n < 0) throw new RangeError(`no gRPC status ${name}`);
  return n;
}

/** A failed gRPC call as grpc-js reports it. */
export interface GrpcFailure {
  code: number;
  details: string;
  /** The trailer `idmint-error-code`, if the status carried one. */
  idmintCode?: string | undefined;
}

/** The typed error of a failed gRPC call to `node`. */
export function fromGrpc(f: GrpcFailure, node?: string): IdmintError {
  const origin = { node, grpcStatus: f.code };
  if (f.idmintCode !== undefined && f.idmintCode !== "") {
    const prefix = `${f.idmintCode}: `;
    const message = f.details.startsWith(prefix) ? f.details.slice(prefix.length) : f.details;
    return errorFor(f.idmintCode, message, origin);
  }
  const name = GRPC_NAMES[f.code] ?? String(f.code);
  return new UnavailableError(`${node ?? "the node"}: ${f.details || "no answer"} (${name})`, origin);
}

/** The typed error of an HTTP answer `status` with body `text` from `node`. */
export function fromHttp(status: number, text: string, node?: string): IdmintError {
  const origin = { node, httpStatus: status };
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const error = (body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (typeof error?.code === "string") {
    return errorFor(error.code, typeof error.message === "string" ? error.message : "", origin);
  }
  // Not an idmint answer (a proxy's 502, an empty body from the HTTP library).
  return new UnavailableError(`${node ?? "the node"}: HTTP ${status}`, origin);
}
