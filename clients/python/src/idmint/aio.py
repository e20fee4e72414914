"""`AsyncClient`: the asyncio client, the same policy as `Client` (docs/client.md): a refill
task per sequence namespace, batches for the other kinds, the unused tail handed back on
`close()`. Use it from one event loop. At interpreter exit an unclosed client's tails go back
over a sync gRPC call (the loop is gone by then).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any, Awaitable, Callable, Optional, Sequence, TypeVar, Union

from .buffer import Block
from .client import backoff, first_block_size, ids_of_blocks
from .config import ClientConfig, Tls
from .errors import Closed, IdmintError, NodeError, Unavailable, UnknownNamespace
from .grpc_transport import GrpcTransport
from .http_transport import HttpTransport
from .local_snowflake import LocalSnowflake, LocalSnowflakeConfig, open_local
from .names import check_count, check_name, check_route
from .nodes import AsyncNodes, check_token
from .sequence import SequenceCore, Stats, Tail
from .shard_map import AsyncShardMaps
from .timed import TimedCore
from .typed import AsyncIds
from .types import AsyncTransport, Id, Leased, NamespaceInfo

T = TypeVar("T")
#: Clients not closed yet, held until `close()` so that interpreter exit can close them.
_OPEN: "set[AsyncClient]" = set()


class _Sequence:
    def __init__(self, name: str, core: SequenceCore, nodes: AsyncNodes,
                 config: ClientConfig) -> None:
        self.name, self.core, self.nodes, self.config = name, core, nodes, config
        self.woken = asyncio.Event()
        self.changed = asyncio.Event()
        self.stopping = False
        core.wake = self.woken.set
        self.task = asyncio.get_running_loop().create_task(self._refills())

    def _signal(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    async def _refills(self) -> None:
        pause = 0.0
        while not self.stopping:
            try:
                await asyncio.wait_for(self.woken.wait(), self.config.refill_tick)
            except asyncio.TimeoutError:
                pass
            self.woken.clear()
            count = self.core.plan_refill(time.monotonic_ns())
            if count is None:
                continue
            failed = False

            def block(t: AsyncTransport, n: int = count, floor: Optional[int] = self.core.floor,
                      extends: Optional[int] = self.core.extends()) -> Awaitable[Leased]:
                return t.block(self.name, n, floor, extends)

            try:
                node, leased = await self.nodes.call(block)
            except IdmintError as e:
                self.core.refill_failed(e)
                failed = True
            else:
                try:
                    self.core.refill_done(leased, node)
                except NodeError:
                    failed = True
            self._signal()
            if failed:
                pause = backoff(pause)
                await asyncio.sleep(pause * (1 - random.random() / 2))
            else:
                pause = 0.0

    async def wait_for(self, attempt: Callable[[], Optional[T]]) -> T:
        core = self.core
        failures = core.failures
        deadline = time.monotonic() + self.config.refill_wait
        while True:
            changed = self.changed
            got = attempt()
            if got is not None:
                return got
            if core.failures != failures and core.last_error is not None:
                raise core.last_error
            left = deadline - time.monotonic()
            if left <= 0:
                raise core.last_error or Unavailable(
                    f"no ids of {self.name} within {self.config.refill_wait} s")
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def next(self) -> int:
        got = self.core.try_next()
        return got if got is not None else await self.wait_for(self.core.try_next)

    async def next_batch(self, count: int) -> list[int]:
        blocks: list[Block] = []
        takes = 0
        generation: Optional[int] = None
        need = count
        try:
            while need > 0:
                def attempt(need: int = need) -> Optional[tuple[list[Block], Optional[int]]]:
                    got = self.core.take_batch(need)
                    return got if got[0] else None
                got, generation = await self.wait_for(attempt)
                takes += 1
                blocks += got
                need -= sum(len(b) for b in got)
        except IdmintError:
            if blocks:
                self.core.put_back(blocks, generation if takes == 1 else None)
            raise
        return ids_of_blocks(blocks)

    async def close(self) -> Optional[Tail]:
        self.stopping = True
        self.woken.set()
        if not self.task.done():  # a task of a loop that ended was cancelled with it
            await self.task
        return self.core.begin_close()


class _Timed:
    def __init__(self, name: str, core: TimedCore, nodes: AsyncNodes,
                 config: ClientConfig) -> None:
        self.name, self.core, self.nodes, self.config = name, core, nodes, config
        self.fetching = asyncio.Lock()

    async def _fetch(self, count: int, queue: bool) -> list[Id]:
        stamp = self.core.clock()
        _, ids = await self.nodes.call(lambda t: t.next(self.name, count, self.core.kind))
        return self.core.accept(ids, stamp, queue)

    async def next(self) -> Id:
        deadline = time.monotonic() + self.config.refill_wait
        while True:
            got = self.core.take(1)
            if got:
                return got[0]
            async with self.fetching:
                got = self.core.take(1)
                if got:
                    return got[0]
                await self._fetch(self.core.fetch_size(), queue=True)
            if time.monotonic() > deadline:
                raise Unavailable(f"no fresh ids of {self.name} within {self.config.refill_wait} s")

    async def next_batch(self, count: int) -> list[Id]:
        out = self.core.take(count)
        deadline = time.monotonic() + self.config.refill_wait
        while len(out) < count:
            out += await self._fetch(min(self.config.max_request, count - len(out)), queue=False)
            if len(out) < count and time.monotonic() > deadline:
                raise Unavailable(f"no fresh ids of {self.name} within {self.config.refill_wait} s")
        return out


class AsyncNamespace:
    """A handle on one namespace of an `AsyncClient`."""

    def __init__(self, impl: Union[_Sequence, _Timed], info: NamespaceInfo) -> None:
        self._impl = impl
        self.info = info
        self.name = info.namespace
        self.kind = info.kind

    async def next(self) -> Id:
        return await self._impl.next()

    async def next_batch(self, count: int) -> list[Id]:
        return list(await self._impl.next_batch(check_count(count)))

    def try_next(self) -> Optional[Id]:
        """An id if one is held (no network, no waiting), else None."""
        if isinstance(self._impl, _Sequence):
            return self._impl.core.try_next()
        got = self._impl.core.take(1)
        return got[0] if got else None

    def stats(self) -> Stats:
        return self._impl.core.stats()


class AsyncClient:
    """The asyncio client; the same arguments as `Client`. Create and use it inside one
    running event loop; `async with AsyncClient(...) as client:` closes it."""

    def __init__(self, urls: Union[str, Sequence[str]] = (), *, http_urls: Sequence[str] = (),
                 token: Optional[str] = None, tls: Optional[Tls] = None,
                 config: Optional[ClientConfig] = None) -> None:
        self.config = config or ClientConfig()
        self._urls = [urls] if isinstance(urls, str) else list(urls)
        self._token, self._tls = token, tls
        self._http_urls = list(http_urls)
        AsyncNodes.check(self._urls, self._http_urls)
        check_token(token)
        self._connected: Optional[AsyncNodes] = None
        self._shard_maps = AsyncShardMaps(len(self._urls) + len(self._http_urls),
                                          self.config.shard_map_refresh)
        self._lock = asyncio.Lock()
        self._namespaces: dict[str, AsyncNamespace] = {}
        self._closed = False
        _OPEN.add(self)

    @property
    def _nodes(self) -> AsyncNodes:
        """The nodes, connected on first use, inside the running loop (grpc.aio channels
        belong to the loop that creates them)."""
        if self._connected is None:
            self._connected = AsyncNodes.connect(self._urls, self._http_urls, self._token,
                                                 self._tls, self.config.op_timeout)
        return self._connected

    async def namespace(self, name: str) -> AsyncNamespace:
        return await self._namespace(name, create=True)

    def sequence(self, name: str) -> AsyncIds[int]:
        """As `Client.sequence`: a typed handle, set up and kind-checked on first use."""
        return AsyncIds(self, name, "sequence")

    def snowflake(self, name: str) -> AsyncIds[int]:
        return AsyncIds(self, name, "snowflake")

    def uuid7(self, name: str) -> AsyncIds[uuid.UUID]:
        return AsyncIds(self, name, "uuid7")

    def ulid(self, name: str) -> AsyncIds[str]:
        return AsyncIds(self, name, "ulid")

    async def _namespace(self, name: str, create: bool) -> AsyncNamespace:
        handle = self._namespaces.get(name)
        if handle is not None:
            return handle
        async with self._lock:
            if self._closed:
                raise Closed("the client is closed")
            handle = self._namespaces.get(name)
            if handle is None:
                handle = await self._setup(check_name(name), create)
                self._namespaces[name] = handle
            return handle

    async def _setup(self, name: str, create: bool) -> AsyncNamespace:
        first = None
        try:
            _, info = await self._nodes.call(lambda t: t.info(name))
        except UnknownNamespace:
            if not create:
                raise
            count = first_block_size(self.config)
            first = await self._nodes.call(lambda t: t.block(name, count))
            _, info = await self._nodes.call(lambda t: t.info(name))
        if info.kind == "sequence" and info.sequence is not None:
            core = SequenceCore(name, info.sequence, self.config.buffer)
            if first is not None:
                core.refill_done(first[1], first[0])
            return AsyncNamespace(_Sequence(name, core, self._nodes, self.config), info)
        if info.kind in ("snowflake", "uuid7", "ulid"):
            timed = TimedCore(name, info.kind, self.config.validity, self.config.max_time_batch)
            return AsyncNamespace(_Timed(name, timed, self._nodes, self.config), info)
        raise NodeError(f"namespace {name} is of a kind this client does not know: {info.kind}")

    async def next(self, namespace: str, *, shard: Optional[int] = None,
                   key: Optional[int] = None) -> Id:
        if check_route(shard, key):
            return (await self._routed(namespace, 1, shard, key))[0]
        handle = self._namespaces.get(namespace) or await self.namespace(namespace)
        return await handle._impl.next()

    async def next_batch(self, namespace: str, count: int, *, shard: Optional[int] = None,
                         key: Optional[int] = None) -> list[Id]:
        """As `Client.next_batch`: with `shard` or `key`, ids of that shard, unbuffered."""
        check_count(count)
        if check_route(shard, key):
            return await self._routed(namespace, count, shard, key)
        return await (await self.namespace(namespace)).next_batch(count)

    async def _routed(self, namespace: str, count: int, shard: Optional[int],
                      key: Optional[int]) -> list[Id]:
        """As `Client._routed`: the shard's holder first, from the shard map."""
        check_name(namespace)
        if self._closed:
            raise Closed("the client is closed")
        nodes = self._nodes
        choice = await self._shard_maps.choose(namespace, shard, key, nodes.transports)
        tried: list[AsyncTransport] = []

        async def take(t: AsyncTransport) -> list[Id]:
            tried.append(t)
            return await t.next(namespace, count, "snowflake", shard, key)

        try:
            return (await nodes.call(take, None if choice is None else choice.node))[1]
        finally:
            if choice is not None and len(tried) > 1:
                self._shard_maps.failed(namespace, choice)

    async def _node_call(self, fn: Callable[[AsyncTransport], Awaitable[T]]) -> T:
        if self._closed:
            raise Closed("the client is closed")
        return (await self._nodes.call(fn))[1]

    async def info(self, namespace: str) -> NamespaceInfo:
        check_name(namespace)
        return await self._node_call(lambda t: t.info(namespace))

    async def decode(self, namespace: str, id: Union[str, int]) -> dict[str, Any]:
        check_name(namespace)
        return await self._node_call(lambda t: t.decode(namespace, str(id)))

    async def local_snowflake(self, namespace: str,
                              config: Optional[LocalSnowflakeConfig] = None
                              ) -> "AsyncLocalSnowflake":
        """As `Client.local_snowflake`: `next()` makes ids in the process (no await); the
        lease is taken and renewed over sync gRPC channels of its own, off the event loop."""
        info = await self.info(namespace)
        transports = [GrpcTransport(url, f"node #{i + 1}", self._token, self._tls,
                                    self.config.op_timeout) for i, url in enumerate(self._urls)]
        try:
            handle = await asyncio.to_thread(open_local, namespace, info, transports, config)
        except BaseException:
            for t in transports:
                t.close()
            raise
        return AsyncLocalSnowflake(handle, transports)

    def stats(self, namespace: str) -> Stats:
        """The counters of a namespace this client has set up (also after `close`)."""
        handle = self._namespaces.get(namespace)
        if handle is None:
            raise UnknownNamespace(f"namespace {namespace} is not set up on this client")
        return handle.stats()

    def all_stats(self) -> dict[str, Stats]:
        """The counters of every namespace this client has set up (also after `close`)."""
        return {name: handle.stats() for name, handle in list(self._namespaces.items())}

    async def close(self) -> None:
        """As `Client.close`."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
        for handle in list(self._namespaces.values()):
            impl = handle._impl
            if isinstance(impl, _Timed):
                impl.core.close()
                continue
            tail = await impl.close()
            if tail is None:
                continue
            def give(t: AsyncTransport, ns: str = impl.name, b: Block = tail.block,
                     lease: int = tail.lease) -> Awaitable[bool]:
                return t.give_back(ns, b.start, b.end, b.step, lease)

            try:
                given = await self._nodes.call_one(tail.node, give)
            except IdmintError:
                given = False
            impl.core.give_back_done(tail, given)
        if self._connected is not None:
            await self._connected.close()
        _OPEN.discard(self)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _close_at_exit(self) -> None:
        """Without the event loop: the tails go back over sync gRPC calls."""
        self._closed = True
        for handle in list(self._namespaces.values()):
            impl = handle._impl
            if isinstance(impl, _Timed):
                continue
            impl.stopping = True
            tail = impl.core.begin_close()
            if tail is None:
                continue
            label = f"node #{tail.node + 1}"
            transport: Union[GrpcTransport, HttpTransport]
            if tail.node < len(self._urls):
                transport = GrpcTransport(self._urls[tail.node], label, self._token, self._tls,
                                          self.config.op_timeout)
            else:
                transport = HttpTransport(self._http_urls[tail.node - len(self._urls)], label,
                                          self._token, self._tls, self.config.op_timeout)
            try:
                given = transport.give_back(impl.name, tail.block.start, tail.block.end,
                                            tail.block.step, tail.lease)
            except IdmintError:
                given = False
            finally:
                transport.close()
            impl.core.give_back_done(tail, given)


class AsyncLocalSnowflake:
    """`LocalSnowflake` for asyncio: `next()` is the same call (no IO); `close()` releases the
    lease off the event loop. An async context manager."""

    def __init__(self, handle: LocalSnowflake, transports: list[GrpcTransport]) -> None:
        self._handle = handle
        self._transports = transports
        self.next = handle.next
        self.layout = handle.layout

    @property
    def worker(self) -> int:
        return self._handle.worker

    async def close(self) -> None:
        await asyncio.to_thread(self._handle.close)
        for t in self._transports:
            t.close()

    async def __aenter__(self) -> "AsyncLocalSnowflake":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def close_all_at_exit() -> None:
    for client in list(_OPEN):
        if not client._closed:
            try:
                client._close_at_exit()
            except Exception:
                pass
