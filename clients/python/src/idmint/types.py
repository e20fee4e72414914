"""What transports answer: ids, leased blocks, namespace descriptions; and the transport
protocols every node connection (gRPC, HTTP/JSON; sync and asyncio) implements."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Mapping, Optional, Protocol, Union

#: An id: `int` (sequence, snowflake), `uuid.UUID` (UUIDv7) or `str` (ULID, canonical text).
Id = Union[int, uuid.UUID, str]

KINDS = ("sequence", "snowflake", "uuid7", "ulid")


@dataclass(frozen=True)
class Leased:
    """A block `[start, end)` with `step`, leased with `lease` (0: it cannot go back).
    `lease_start`: the first id the lease covers, below `start` when it joined the lease the
    block request extended (0 from nodes that do not join: read it as `start`)."""

    start: int
    end: int
    step: int
    lease: int
    lease_start: int = 0


@dataclass(frozen=True)
class SequenceSpec:
    """What a block of a sequence namespace must be: its step, one of the residue classes the
    node's authority grants, at most the width's largest id."""

    width: int
    step: int
    offset: int
    residues: tuple[int, ...]

    @property
    def max_id(self) -> int:
        return (1 << (self.width - 1)) - 1


@dataclass(frozen=True)
class NamespaceInfo:
    """A namespace as a node describes it: `kind` (sequence, snowflake, uuid7, ulid),
    `sequence` (for sequence namespaces) and `details`, the node's whole answer as JSON-like
    data (settings and live state; docs/api.md)."""

    namespace: str
    kind: str
    sequence: Optional[SequenceSpec] = None
    details: Mapping[str, Any] = field(default_factory=dict)


class Transport(Protocol):
    """One node, called synchronously. Every method raises an `IdmintError`."""

    label: str

    def next(self, namespace: str, count: int, kind: str, shard: Optional[int] = None,
             key: Optional[int] = None) -> list[Id]: ...
    def block(self, namespace: str, count: int, min_start: Optional[int] = None,
              extends: Optional[int] = None) -> Leased: ...
    def give_back(self, namespace: str, start: int, end: int, step: int, lease: int) -> bool: ...
    def info(self, namespace: str) -> NamespaceInfo: ...
    def decode(self, namespace: str, id: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


class AsyncTransport(Protocol):
    """One node, called from asyncio."""

    label: str

    def next(self, namespace: str, count: int, kind: str, shard: Optional[int] = None,
             key: Optional[int] = None) -> Awaitable[list[Id]]: ...
    def block(self, namespace: str, count: int, min_start: Optional[int] = None,
              extends: Optional[int] = None) -> Awaitable[Leased]: ...
    def give_back(self, namespace: str, start: int, end: int, step: int,
                  lease: int) -> Awaitable[bool]: ...
    def info(self, namespace: str) -> Awaitable[NamespaceInfo]: ...
    def decode(self, namespace: str, id: str) -> Awaitable[dict[str, Any]]: ...
    def close(self) -> Awaitable[None]: ...
