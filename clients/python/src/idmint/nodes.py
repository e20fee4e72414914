"""The nodes a client talks to, and the one fallback policy across them (docs/client.md,
"Several nodes"): a call goes to the node that answered last; a failure another node may not
have (no answer, `authority_unavailable`, `shutting_down`, `internal_error`, a protocol error)
moves on to the next, each node at most once per call; other errors are the answer. When every
node failed, the last failure is raised. A call given `first` (a shard's holder, from the shard
map) tries that node first and leaves the usual order as it was when that node answers. Nodes
are named by position (`node #1`), never by url.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Generic, Optional, Sequence, TypeVar

from .config import Tls
from .errors import IdmintError, Unavailable
from .grpc_transport import AsyncGrpcTransport, GrpcTransport
from .http_transport import AsyncHttpTransport, HttpTransport
from .types import AsyncTransport, Transport

T = TypeVar("T")
N = TypeVar("N")

#: Codes after which another node is tried.
FAILOVER_CODES = frozenset(
    {"unavailable", "authority_unavailable", "no_leader", "shutting_down", "internal_error",
     "node_error"})


def check_token(token: Optional[str]) -> None:
    """A token must be printable ASCII without spaces (it travels in a header)."""
    if token is not None and not (token and token.isascii() and token.isprintable()
                                  and " " not in token):
        raise ValueError("the token is empty or not printable ASCII")


def _labels(urls: Sequence[str], http_urls: Sequence[str]) -> list[tuple[str, str, bool]]:
    """(url, label, is_http) of every node: the gRPC urls, then the HTTP ones."""
    nodes = [(u, f"node #{i + 1}", False) for i, u in enumerate(urls)]
    nodes += [(u, f"node #{len(urls) + i + 1} (http)", True) for i, u in enumerate(http_urls)]
    if not nodes:
        raise ValueError("at least one node url is needed")
    return nodes


class _Order(Generic[N]):
    def __init__(self, transports: list[N]) -> None:
        self.transports = transports
        self.current = 0

    def order(self, first: Optional[int] = None) -> list[int]:
        """The nodes a call tries, in order: from the current one on; with `first` (a shard's
        holder), that node, then the others from the current one on."""
        n = len(self.transports)
        start = self.current
        usual = [(start + i) % n for i in range(n)]
        if first is None or not 0 <= first < n:
            return usual
        return [first] + [i for i in usual if i != first]


class Nodes(_Order[Transport]):
    """Sync nodes. `call(fn)` returns (the node's index, fn's answer)."""

    @staticmethod
    def connect(urls: Sequence[str], http_urls: Sequence[str], token: Optional[str],
                tls: Optional[Tls], timeout: float) -> "Nodes":
        check_token(token)
        transports: list[Transport] = [
            (HttpTransport if is_http else GrpcTransport)(url, label, token, tls, timeout)
            for url, label, is_http in _labels(urls, http_urls)]
        return Nodes(transports)

    def call(self, fn: Callable[[Transport], T],
             first: Optional[int] = None) -> tuple[int, T]:
        error: Optional[IdmintError] = None
        for index in self.order(first):
            try:
                answer = fn(self.transports[index])
            except IdmintError as e:
                if e.code not in FAILOVER_CODES:
                    raise
                error = e
                continue
            if index != first:
                self.current = index
            return index, answer
        raise error or Unavailable("no node")

    def call_one(self, index: int, fn: Callable[[Transport], T]) -> T:
        return fn(self.transports[index])

    def close(self) -> None:
        for t in self.transports:
            t.close()


class AsyncNodes(_Order[AsyncTransport]):
    """Asyncio nodes; create inside the event loop that uses them."""

    @staticmethod
    def check(urls: Sequence[str], http_urls: Sequence[str]) -> None:
        """Raises `ValueError` for urls `connect` would refuse, without connecting."""
        for url, _, is_http in _labels(urls, http_urls):
            if not url.startswith(("http://", "https://")):
                kind = "an HTTP" if is_http else "a gRPC"
                raise ValueError(f"{url!r}: {kind} url is http://HOST:PORT or https://HOST:PORT")

    @staticmethod
    def connect(urls: Sequence[str], http_urls: Sequence[str], token: Optional[str],
                tls: Optional[Tls], timeout: float) -> "AsyncNodes":
        check_token(token)
        transports: list[AsyncTransport] = [
            (AsyncHttpTransport if is_http else AsyncGrpcTransport)(url, label, token, tls, timeout)
            for url, label, is_http in _labels(urls, http_urls)]
        return AsyncNodes(transports)

    async def call(self, fn: Callable[[AsyncTransport], Awaitable[T]],
                   first: Optional[int] = None) -> tuple[int, T]:
        error: Optional[IdmintError] = None
        for index in self.order(first):
            try:
                answer = await fn(self.transports[index])
            except IdmintError as e:
                if e.code not in FAILOVER_CODES:
                    raise
                error = e
                continue
            if index != first:
                self.current = index
            return index, answer
        raise error or Unavailable("no node")

    async def call_one(self, index: int, fn: Callable[[AsyncTransport], Awaitable[T]]) -> T:
        return await fn(self.transports[index])

    async def close(self) -> None:
        for t in self.transports:
            await t.close()
