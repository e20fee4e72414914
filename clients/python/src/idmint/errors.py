"""Typed errors: one exception class per idmint error code.

Every error a node answers carries a stable snake_case code (gRPC: the `idmint-error-code`
trailer; HTTP: the error body's `code`). `error_for(code, message)` turns it into the class of
that code, a subclass of `IdmintError`; a code this version does not know (a newer server's)
gives `IdmintError` itself, with the code kept. The client's own conditions have codes too:
`unavailable` (no node answered) and `closed` (a call after `close()`).
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "IdmintError", "InvalidNamespace", "UnknownNamespace", "InvalidCount", "InvalidRequest",
    "InvalidId", "WrongKind", "NamespaceExhausted", "NamespaceRetired", "TimeExhausted",
    "AuthorityUnavailable", "NoLeader",
    "SettingsConflict", "ShuttingDown", "InternalError", "NamespaceLost", "TooManyNamespaces",
    "NotFound", "MethodNotAllowed", "Unauthorized", "Forbidden", "RateLimited",
    "TooManyStreams", "Unavailable", "Closed", "NodeError", "error_class", "error_for",
]


class IdmintError(Exception):
    """Base of every idmint error. `code` is the stable code; `message` is for people."""

    code: str = "unknown"
    #: Whether retrying later (or on another node) may succeed.
    retryable: bool = False

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidNamespace(IdmintError):
    """The name is not 1-128 of [A-Za-z0-9_.:-] starting with a letter or digit."""

    code = "invalid_namespace"


class UnknownNamespace(IdmintError):
    """No such namespace, and this request may not create it."""

    code = "unknown_namespace"


class InvalidCount(IdmintError):
    """A count that is not a whole number in range."""

    code = "invalid_count"


class InvalidRequest(IdmintError):
    """Another argument is wrong."""

    code = "invalid_request"


class InvalidId(IdmintError):
    """The text is not an id of the namespace's kind (or of the layout, offline)."""

    code = "invalid_id"


class WrongKind(IdmintError):
    """The operation does not apply to the namespace's kind."""

    code = "wrong_kind"


class NamespaceExhausted(IdmintError):
    """A sequence namespace has handed out its last id."""

    code = "namespace_exhausted"


class NamespaceRetired(IdmintError):
    """An operator retired the sequence namespace: it hands out no id any more."""

    code = "namespace_retired"


class TimeExhausted(IdmintError):
    """A snowflake layout's timestamp field has run out."""

    code = "time_exhausted"


class AuthorityUnavailable(IdmintError):
    """The node's buffer is empty and its authority did not answer."""

    code = "authority_unavailable"
    retryable = True


class NoLeader(IdmintError):
    """A strict namespace had no leader within the node's wait (a failover)."""

    code = "no_leader"
    retryable = True


class SettingsConflict(IdmintError):
    """The stored namespace has other settings than requested."""

    code = "settings_conflict"


class ShuttingDown(IdmintError):
    """The node is stopping."""

    code = "shutting_down"
    retryable = True


class InternalError(IdmintError):
    """A consistency check failed on the node; the namespace stopped serving."""

    code = "internal_error"


class NamespaceLost(IdmintError):
    """The namespace's store lost it; never re-created."""

    code = "namespace_lost"


class TooManyNamespaces(IdmintError):
    """The node creates no more namespaces on first use."""

    code = "too_many_namespaces"


class NotFound(IdmintError):
    """No such route (HTTP)."""

    code = "not_found"


class MethodNotAllowed(IdmintError):
    """The route exists, not with this method (HTTP)."""

    code = "method_not_allowed"


class Unauthorized(IdmintError):
    """No bearer token, or one the node does not know."""

    code = "unauthorized"


class Forbidden(IdmintError):
    """The token lacks the scope for this namespace and operation."""

    code = "forbidden"


class RateLimited(IdmintError):
    """The token's rate quota is used up for now."""

    code = "rate_limited"
    retryable = True


class TooManyStreams(IdmintError):
    """The node serves its most streams already."""

    code = "too_many_streams"
    retryable = True


class Unavailable(IdmintError):
    """No node answered: refused or closed connections, TLS refused, no answer in time."""

    code = "unavailable"
    retryable = True


class Closed(IdmintError):
    """The client was closed."""

    code = "closed"


class NodeError(IdmintError):
    """A node answered something that breaks the protocol (a status without an idmint code,
    a block that is not of the namespace)."""

    code = "node_error"


_BY_CODE: dict[str, type[IdmintError]] = {
    cls.code: cls
    for cls in (
        InvalidNamespace, UnknownNamespace, InvalidCount, InvalidRequest, InvalidId, WrongKind,
        NamespaceExhausted, NamespaceRetired, TimeExhausted, AuthorityUnavailable, NoLeader,
        SettingsConflict, ShuttingDown,
        InternalError, NamespaceLost, TooManyNamespaces, NotFound, MethodNotAllowed,
        Unauthorized, Forbidden, RateLimited, TooManyStreams, Unavailable, Closed, NodeError,
    )
}


def error_class(code: str) -> type[IdmintError]:
    """The class of `code`; `IdmintError` for a code this version does not know."""
    return _BY_CODE.get(code, IdmintError)


def error_for(code: str, message: str) -> IdmintError:
    """The typed error of `code` with `message`."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return IdmintError(message, code)
    return cls(message)


def strip_code(code: str, message: str) -> str:
    """A node's message without its leading `"<code>: "` (gRPC statuses carry it)."""
    prefix = code + ": "
    return message[len(prefix):] if message.startswith(prefix) else message
