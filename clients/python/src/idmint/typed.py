"""Typed handles: one per namespace kind, so that an id's static type follows the kind.

`client.sequence(name)` and `client.snowflake(name)` give `Ids[int]`, `client.uuid7(name)`
`Ids[uuid.UUID]`, `client.ulid(name)` `Ids[str]` (`AsyncIds[...]` from an `AsyncClient`).
Making a handle costs nothing; its first use sets the namespace up (as `client.namespace`)
and checks the kind the node describes: a handle of another kind raises `WrongKind` (and a
snowflake, UUIDv7 or ULID handle of a namespace the node does not have raises
`UnknownNamespace` without creating it; a sequence handle creates it as `next` does, with
the node's `auto_create`). The untyped `client.next(name)` stays, returning `Id`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Optional, TypeVar, cast

from .errors import WrongKind
from .names import check_count, check_name
from .sequence import Stats
from .types import NamespaceInfo

if TYPE_CHECKING:
    from .aio import AsyncClient, AsyncNamespace
    from .client import Client, Namespace
    from .local import LocalIds

T = TypeVar("T")

#: The handle method of each kind, for the error that names the right one.
_HANDLE = {"sequence": "sequence", "snowflake": "snowflake", "uuid7": "uuid7", "ulid": "ulid"}


def check_kind(info: NamespaceInfo, kind: str) -> None:
    """`WrongKind` unless the namespace `info` describes is of `kind`."""
    if info.kind != kind:
        method = _HANDLE.get(info.kind)
        hint = f"; use client.{method}({info.namespace!r})" if method else ""
        raise WrongKind(f"namespace {info.namespace} is a {info.kind} namespace, not {kind}: "
                        f"client.{kind}() is for {kind} namespaces{hint}")


class Ids(Generic[T]):
    """A typed handle of one namespace of a `Client` (see the module docs). Thread-safe, as
    `Namespace` is; ids increase per namespace per client."""

    def __init__(self, client: Client, name: str, kind: str) -> None:
        self._client = client
        self.name = check_name(name)
        #: The kind this handle is for (sequence, snowflake, uuid7, ulid).
        self.kind = kind
        self._handle: Optional[Namespace] = None

    def namespace(self) -> Namespace:
        """The untyped handle, set up and kind-checked on first use."""
        handle = self._handle
        if handle is None:
            handle = self._client._namespace(self.name, create=self.kind == "sequence")
            check_kind(handle.info, self.kind)
            self._handle = handle
        return handle

    def next(self) -> T:
        """The next id, waiting for a refill only when none is held."""
        return cast(T, (self._handle or self.namespace()).next())

    def next_batch(self, count: int) -> list[T]:
        """`count` ids, increasing."""
        check_count(count)
        return cast("list[T]", (self._handle or self.namespace()).next_batch(count))

    def try_next(self) -> Optional[T]:
        """An id if one is held (no network, no waiting), else None."""
        return cast("Optional[T]", (self._handle or self.namespace()).try_next())

    def local(self) -> LocalIds:
        """A handle for one thread (sequence namespaces): `next(ids)` at iterator speed."""
        return self.namespace().local()

    def stats(self) -> Stats:
        return self.namespace().stats()


class AsyncIds(Generic[T]):
    """A typed handle of one namespace of an `AsyncClient` (see the module docs)."""

    def __init__(self, client: AsyncClient, name: str, kind: str) -> None:
        self._client = client
        self.name = check_name(name)
        self.kind = kind
        self._handle: Optional[AsyncNamespace] = None

    async def namespace(self) -> AsyncNamespace:
        """The untyped handle, set up and kind-checked on first use."""
        handle = self._handle
        if handle is None:
            handle = await self._client._namespace(self.name, create=self.kind == "sequence")
            check_kind(handle.info, self.kind)
            self._handle = handle
        return handle

    async def next(self) -> T:
        return cast(T, await (self._handle or await self.namespace()).next())

    async def next_batch(self, count: int) -> list[T]:
        check_count(count)
        return cast("list[T]", await (self._handle or await self.namespace()).next_batch(count))

    def try_next(self) -> Optional[T]:
        """An id if one is held (no network, no waiting), else None; None before first use."""
        return None if self._handle is None else cast("Optional[T]", self._handle.try_next())

    async def stats(self) -> Stats:
        return (await self.namespace()).stats()
