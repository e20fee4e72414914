//! Typed errors: one class per stable idmint error code (docs/api.md), each a subclass of
//! `IdmintError` carrying `code`, the gRPC status or HTTP status it came with, and the node
//! (by position, `node #1`, never by url) that answered. The client's own failures have
//! classes of their own (`UnavailableError`, `ClosedError`, `ProtocolError`,
//! `InvalidConfigError`, `UnsafeIdError`).
//!
//! Invariant: `errorFor(code, ...)` is the one place a code becomes a class; a code this
//! version does not know (a newer node's) becomes the base `NodeError` with the code kept. A
//! node's error has the node's message as its `message`; which node answered is in `node`.

/** The stable error codes a node sends (docs/api.md), as on the wire. */
export const ERROR_CODES = [
  "invalid_namespace",
  "unknown_namespace",
  "invalid_count",
  "invalid_request",
  "invalid_id",
  "wrong_kind",
  "namespace_exhausted",
  "namespace_retired",
  "time_exhausted",
  "authority_unavailable",
  "no_leader",
  "settings_conflict",
  "shutting_down",
  "internal_error",
  "namespace_lost",
  "too_many_namespaces",
  "not_found",
  "method_not_allowed",
  "unauthorized",
  "forbidden",
  "rate_limited",
  "too_many_streams",
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** Where an error came from: the node's position and its gRPC or HTTP status. */
export interface ErrorOrigin {
  /** `node #1`, `node #2`... in the order the urls were given. */
  node?: string;
  /** The gRPC status code (numeric), for errors answered over gRPC. */
  grpcStatus?: number;
  /** The HTTP status, for errors answered over HTTP/JSON. */
  httpStatus?: number;
}

/** Every error the client throws. */
export class IdmintError extends Error {
  /** The idmint code (`unknown_namespace`, ...), or the client's own (`unavailable`, `closed`...). */
  readonly code: string;
  readonly node: string | undefined;
  readonly grpcStatus: number | undefined;
  readonly httpStatus: number | undefined;

  constructor(code: string, message: string, origin: ErrorOrigin = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.node = origin.node;
    this.grpcStatus = origin.grpcStatus;
    this.httpStatus = origin.httpStatus;
  }

  /** Whether the same call may succeed later (on this or another node). */
  get retryable(): boolean {
    return false;
  }
}

/** An error a node answered with one of the stable codes. */
export class NodeError extends IdmintError {}

export class InvalidNamespaceError extends NodeError {}
export class UnknownNamespaceError extends NodeError {}
export class InvalidCountError extends NodeError {}
export class InvalidRequestError extends NodeError {}
export class InvalidIdError extends NodeError {}
export class WrongKindError extends NodeError {}
export class NamespaceExhaustedError extends NodeError {}
export class NamespaceRetiredError extends NodeError {}
export class TimeExhaustedError extends NodeError {}
export class AuthorityUnavailableError extends NodeError {
  override get retryable(): boolean {
    return true;
  }
}
export class NoLeaderError extends NodeError {
  override get retryable(): boolean {
    return true;
  }
}
export class SettingsConflictError extends NodeError {}
export class ShuttingDownError extends NodeError {
  override get retryable(): boolean {
    return true;
  }
}
export class InternalNodeError extends NodeError {}
export class NamespaceLostError extends NodeError {}
export class TooManyNamespacesError extends NodeError {}
export class RouteNotFoundError extends NodeError {}
export class MethodNotAllowedError extends NodeError {}
export class UnauthorizedError extends NodeError {}
export class ForbiddenError extends NodeError {}
export class RateLimitedError extends NodeError {
  override get retryable(): boolean {
    return true;
  }
}
export class TooManyStreamsError extends NodeError {
  override get retryable(): boolean {
    return true;
  }
}
type NodeErrorClass = new (code: string, message: string, origin?: ErrorOrigin) => NodeError;

/** The class of each code. */
export const ERROR_CLASSES: Readonly<Record<ErrorCode, NodeErrorClass>> = {
  invalid_namespace: InvalidNamespaceError,
  unknown_namespace: UnknownNamespaceError,
  invalid_count: InvalidCountError,
  invalid_request: InvalidRequestError,
  invalid_id: InvalidIdError,
  wrong_kind: WrongKindError,
  namespace_exhausted: NamespaceExhaustedError,
  namespace_retired: NamespaceRetiredError,
  time_exhausted: TimeExhaustedError,
  authority_unavailable: AuthorityUnavailableError,
  no_leader: NoLeaderError,
  settings_conflict: SettingsConflictError,
  shutting_down: ShuttingDownError,
  internal_error: InternalNodeError,
  namespace_lost: NamespaceLostError,
  too_many_namespaces: TooManyNamespacesError,
  not_found: RouteNotFoundError,
  method_not_allowed: MethodNotAllowedError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  rate_limited: RateLimitedError,
  too_many_streams: TooManyStreamsError,
};

/** The typed error for a code a node answered. */
export function errorFor(code: string, message: string, origin: ErrorOrigin = {}): NodeError {
  // A code newer than this client: the base class, with the code kept.
  const cls = (ERROR_CLASSES as Record<string, NodeErrorClass | undefined>)[code] ?? NodeError;
  return new cls(code, message, origin);
}

/** No node answered (each failure is in the message), or nothing arrived within the wait. */
export class UnavailableError extends IdmintError {
  constructor(message: string, origin: ErrorOrigin = {}) {
    super("unavailable", message, origin);
  }
  override get retryable(): boolean {
    return true;
  }
}

/** The client was closed. */
export class ClosedError extends IdmintError {
  constructor(message = "the client is closed") {
    super("closed", message);
  }
}

/** A node answered something that breaks the protocol (a block not of the namespace...). */
export class ProtocolError extends IdmintError {
  constructor(message: string, origin: ErrorOrigin = {}) {
    super("protocol", message, origin);
  }
}

/** The client's options are wrong (no url, an unreadable CA file, ...). */
export class InvalidConfigError extends IdmintError {
  constructor(message: string) {
    super("invalid_config", message);
  }
}

/** Ids were asked for as `number` for a namespace whose ids may exceed 2^53 - 1. */
export class UnsafeIdError extends IdmintError {
  constructor(message: string) {
    super("unsafe_id", message);
  }
}

/** An id given to `decode` is not an id of the layout or kind. */
export class DecodeError extends IdmintError {
  constructor(message: string) {
    super("invalid_id", message);
  }
}
