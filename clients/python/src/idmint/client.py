"""`Client`: the sync client. Ids of each namespace are kept in the process (docs/client.md):
sequence namespaces in a buffer of leased blocks refilled by a background thread, the other
kinds in batches fetched with `Next`. Thread-safe; ids increase per namespace per client (and
per `LocalIds` handle). `close()` (also at interpreter exit) hands unused ids back.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar, Union

from .buffer import Block
from .config import ClientConfig, Tls
from .errors import Closed, IdmintError, NodeError, Unavailable, UnknownNamespace
from .local import LocalIds
from .local_snowflake import LocalSnowflake, LocalSnowflakeConfig, open_local
from .names import check_count, check_name, check_route
from .nodes import Nodes
from .sequence import SequenceCore, Stats, Tail
from .shard_map import ShardMaps
from .timed import TimedCore
from .typed import Ids
from .types import Id, Leased, NamespaceInfo, Transport

T = TypeVar("T")
#: Clients not closed yet, held until `close()` so that interpreter exit can close them.
_OPEN: "set[Client]" = set()


def first_block_size(config: ClientConfig) -> int:
    p = config.buffer
    return p.fixed_block if p.fixed_block is not None else p.min_block


def ids_of_blocks(blocks: Iterable[Block]) -> list[int]:
    return list(itertools.chain.from_iterable(range(b.start, b.end, b.step) for b in blocks))


def backoff(previous: float) -> float:
    """The next pause after a failed refill: 50 ms doubling to 2 s."""
    return min(2.0, max(0.05, previous * 2))


class _Sequence:
    """A sequence namespace: the core, its refill thread and the waiting."""

    def __init__(self, name: str, core: SequenceCore, nodes: Nodes, config: ClientConfig) -> None:
        self.name, self.core, self.nodes, self.config = name, core, nodes, config
        self.woken = threading.Event()
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        core.wake = self.woken.set
        self.thread = threading.Thread(target=self._refills, name=f"idmint-refill-{name}",
                                       daemon=True)
        self.thread.start()

    def _refills(self) -> None:
        pause = 0.0
        while not self.stopping.is_set():
            self.woken.wait(self.config.refill_tick)
            self.woken.clear()
            count = self.core.plan_refill(time.monotonic_ns())
            if count is None:
                continue
            failed = False

            def block(t: Transport, n: int = count, floor: Optional[int] = self.core.floor,
                      extends: Optional[int] = self.core.extends()) -> Leased:
                return t.block(self.name, n, floor, extends)

            try:
                node, leased = self.nodes.call(block)
            except IdmintError as e:
                self.core.refill_failed(e)
                failed = True
            else:
                try:
                    self.core.refill_done(leased, node)
                except NodeError:
                    failed = True
            with self.changed:
                self.changed.notify_all()
            if failed:
                pause = backoff(pause)
                self.stopping.wait(pause * (1 - random.random() / 2))
            else:
                pause = 0.0

    def wait_for(self, attempt: Callable[[], Optional[T]]) -> T:
        """`attempt()` until it gives something, waiting for refills; the refill's error if
        one fails meanwhile, `Unavailable` after `refill_wait`."""
        core = self.core
        failures = core.failures
        deadline = time.monotonic() + self.config.refill_wait
        while True:
            events = core.events
            got = attempt()
            if got is not None:
                return got
            if core.failures != failures and core.last_error is not None:
                raise core.last_error
            left = deadline - time.monotonic()
            if left <= 0:
                raise core.last_error or Unavailable(
                    f"no ids of {self.name} within {self.config.refill_wait} s")
            with self.changed:
                if core.events == events:
                    self.changed.wait(left)

    def next(self) -> int:
        got = self.core.try_next()
        return got if got is not None else self.wait_for(self.core.try_next)

    def next_batch(self, count: int) -> list[int]:
        blocks: list[Block] = []
        takes = 0
        generation: Optional[int] = None
        need = count
        try:
            while need > 0:
                def attempt(need: int = need) -> Optional[tuple[list[Block], Optional[int]]]:
                    got = self.core.take_batch(need)
                    return got if got[0] else None
                got, generation = self.wait_for(attempt)
                takes += 1
                blocks += got
                need -= sum(len(b) for b in got)
        except IdmintError:
            if blocks:
                self.core.put_back(blocks, generation if takes == 1 else None)
            raise
        return ids_of_blocks(blocks)

    def wait_chunk(self) -> tuple[Block, int]:
        return self.wait_for(self.core.take_chunk)

    def close(self) -> Optional[Tail]:
        self.stopping.set()
        self.woken.set()
        if self.thread is not threading.current_thread():
            self.thread.join()
        return self.core.begin_close()


class _Timed:
    """A snowflake, UUIDv7 or ULID namespace: batches fetched with `Next`."""

    def __init__(self, name: str, core: TimedCore, nodes: Nodes, config: ClientConfig) -> None:
        self.name, self.core, self.nodes, self.config = name, core, nodes, config

    def _fetch(self, count: int, queue: bool) -> list[Id]:
        stamp = self.core.clock()
        _, ids = self.nodes.call(lambda t: t.next(self.name, count, self.core.kind))
        return self.core.accept(ids, stamp, queue)

    def next(self) -> Id:
        deadline = time.monotonic() + self.config.refill_wait
        while True:
            got = self.core.take(1)
            if got:
                return got[0]
            with self.core.fetch_lock:
                got = self.core.take(1)
                if got:
                    return got[0]
                self._fetch(self.core.fetch_size(), queue=True)
            if time.monotonic() > deadline:
                raise Unavailable(f"no fresh ids of {self.name} within {self.config.refill_wait} s")

    def next_batch(self, count: int) -> list[Id]:
        out = self.core.take(count)
        deadline = time.monotonic() + self.config.refill_wait
        while len(out) < count:
            out += self._fetch(min(self.config.max_request, count - len(out)), queue=False)
            if len(out) < count and time.monotonic() > deadline:
                raise Unavailable(f"no fresh ids of {self.name} within {self.config.refill_wait} s")
        return out


class Namespace:
    """A handle on one namespace of a `Client`: the hot path without the lookup by name."""

    def __init__(self, impl: Union[_Sequence, _Timed], info: NamespaceInfo) -> None:
        self._impl = impl
        self.info = info
        self.name = info.namespace
        self.kind = info.kind
        #: The next id, waiting for a refill only when none is held.
        self.next: Callable[[], Id] = impl.next

    def next_batch(self, count: int) -> list[Id]:
        """`count` ids, increasing, each above every id this client handed out before."""
        return list(self._impl.next_batch(check_count(count)))

    def try_next(self) -> Optional[Id]:
        """An id if one is held (no network, no waiting), else None."""
        if isinstance(self._impl, _Sequence):
            return self._impl.core.try_next()
        got = self._impl.core.take(1)
        return got[0] if got else None

    def local(self) -> LocalIds:
        """A handle for one thread: `next(ids)` at iterator speed (sequence namespaces)."""
        if not isinstance(self._impl, _Sequence):
            raise TypeError(f"local() is for sequence namespaces; {self.name} is {self.kind}")
        return LocalIds.create(self._impl.core, self._impl.wait_chunk)

    def stats(self) -> Stats:
        return self._impl.core.stats()


class Client:
    """The sync client. `urls` are the nodes' gRPC urls (`http://HOST:PORT`, `https://` for
    TLS) in order of preference; `http_urls` their HTTP API urls, tried after every gRPC url
    failed (the fallback transport; give only `http_urls` to use HTTP alone). `token` is sent
    as the bearer token; `tls` names the CA and the client certificate."""

    def __init__(self, urls: Union[str, Sequence[str]] = (), *, http_urls: Sequence[str] = (),
                 token: Optional[str] = None, tls: Optional[Tls] = None,
                 config: Optional[ClientConfig] = None) -> None:
        self.config = config or ClientConfig()
        urls = [urls] if isinstance(urls, str) else list(urls)
        self._nodes = Nodes.connect(urls, list(http_urls), token, tls, self.config.op_timeout)
        self._shard_maps = ShardMaps(len(self._nodes.transports), self.config.shard_map_refresh)
        self._lock = threading.Lock()
        self._namespaces: dict[str, Namespace] = {}
        self._closed = False
        _OPEN.add(self)

    def namespace(self, name: str) -> Namespace:
        """The handle of `name`, set up on first use (read from a node; a sequence namespace
        the node does not have yet is created by the first block, with `auto_create`)."""
        return self._namespace(name, create=True)

    def sequence(self, name: str) -> Ids[int]:
        """A typed handle of the sequence namespace `name` (`WrongKind` at first use if it is
        not one; created there with the node's `auto_create` if the node does not have it)."""
        return Ids(self, name, "sequence")

    def snowflake(self, name: str) -> Ids[int]:
        """A typed handle of the snowflake namespace `name` (`WrongKind` at first use if not)."""
        return Ids(self, name, "snowflake")

    def uuid7(self, name: str) -> Ids[uuid.UUID]:
        """A typed handle of the UUIDv7 namespace `name` (`WrongKind` at first use if not)."""
        return Ids(self, name, "uuid7")

    def ulid(self, name: str) -> Ids[str]:
        """A typed handle of the ULID namespace `name` (`WrongKind` at first use if not)."""
        return Ids(self, name, "ulid")

    def _namespace(self, name: str, create: bool) -> Namespace:
        handle = self._namespaces.get(name)
        if handle is not None:
            return handle
        with self._lock:
            if self._closed:
                raise Closed("the client is closed")
            handle = self._namespaces.get(name)
            if handle is None:
                handle = self._setup(check_name(name), create)
                self._namespaces[name] = handle
            return handle

    def _setup(self, name: str, create: bool) -> Namespace:
        first = None
        try:
            _, info = self._nodes.call(lambda t: t.info(name))
        except UnknownNamespace:
            if not create:
                raise
            count = first_block_size(self.config)
            first = self._nodes.call(lambda t: t.block(name, count))
            _, info = self._nodes.call(lambda t: t.info(name))
        if info.kind == "sequence" and info.sequence is not None:
            core = SequenceCore(name, info.sequence, self.config.buffer)
            if first is not None:
                core.refill_done(first[1], first[0])
            return Namespace(_Sequence(name, core, self._nodes, self.config), info)
        if info.kind in ("snowflake", "uuid7", "ulid"):
            timed = TimedCore(name, info.kind, self.config.validity, self.config.max_time_batch)
            return Namespace(_Timed(name, timed, self._nodes, self.config), info)
        raise NodeError(f"namespace {name} is of a kind this client does not know: {info.kind}")

    def next(self, namespace: str, *, shard: Optional[int] = None,
             key: Optional[int] = None) -> Id:
        """The next id of `namespace`; of one shard with `shard` or `key` (see `next_batch`)."""
        if check_route(shard, key):
            return self._routed(namespace, 1, shard, key)[0]
        return self.namespace(namespace).next()

    def next_batch(self, namespace: str, count: int, *, shard: Optional[int] = None,
                   key: Optional[int] = None) -> list[Id]:
        """`count` ids of `namespace`, increasing. With `shard` (or `key`, whose shard is
        `key % logical_shards`; never both): ids of that shard of a snowflake namespace with
        `shards = "owned"`, fetched from a node on every call, never buffered: with several
        nodes, from the node holding the shard's range first (the namespace's shard map,
        learned from the nodes, refreshed every `config.shard_map_refresh` seconds). Any other
        namespace answers `InvalidRequest`."""
        check_count(count)
        if check_route(shard, key):
            return self._routed(namespace, count, shard, key)
        return self.namespace(namespace).next_batch(count)

    def _routed(self, namespace: str, count: int, shard: Optional[int],
                key: Optional[int]) -> list[Id]:
        """Ids of one shard: first from the node the shard map names for its range, if one
        (`shard_map.py`), then in the usual order."""
        check_name(namespace)
        if self._closed:
            raise Closed("the client is closed")
        choice = self._shard_maps.choose(namespace, shard, key, self._nodes.transports)
        tried: list[Transport] = []

        def take(t: Transport) -> list[Id]:
            tried.append(t)
            return t.next(namespace, count, "snowflake", shard, key)

        try:
            return self._nodes.call(take, None if choice is None else choice.node)[1]
        finally:
            if choice is not None and len(tried) > 1:
                self._shard_maps.failed(namespace, choice)

    def local(self, namespace: str) -> LocalIds:
        """A one-owner handle of a sequence namespace (see `LocalIds`)."""
        return self.namespace(namespace).local()

    def local_snowflake(self, namespace: str,
                        config: Optional[LocalSnowflakeConfig] = None) -> LocalSnowflake:
        """Snowflake ids of `namespace` made in this process, under a worker id leased from
        the namespace's pool over gRPC (see `LocalSnowflake`; the token needs `workers`)."""
        check_name(namespace)
        info = self._node_call(lambda t: t.info(namespace))
        return open_local(namespace, info, self._nodes.transports, config)

    def _node_call(self, fn: Callable[[Transport], T]) -> T:
        if self._closed:
            raise Closed("the client is closed")
        return self._nodes.call(fn)[1]

    def info(self, namespace: str) -> NamespaceInfo:
        """The namespace's settings and live state, as a node describes them."""
        check_name(namespace)
        return self._node_call(lambda t: t.info(namespace))

    def decode(self, namespace: str, id: Union[str, int]) -> dict[str, Any]:
        """What a node says `id` is, as an id of `namespace` (the HTTP answer's shape)."""
        check_name(namespace)
        return self._node_call(lambda t: t.decode(namespace, str(id)))

    def stats(self, namespace: str) -> Stats:
        return self.namespace(namespace).stats()

    def all_stats(self) -> dict[str, Stats]:
        """The counters of every namespace this client has set up (also after `close`)."""
        return {name: handle.stats() for name, handle in list(self._namespaces.items())}

    def close(self) -> None:
        """Stops the refills and hands each sequence namespace's unused tail back to the node
        that leased it (what cannot go back is burned). Later calls raise `Closed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handles = list(self._namespaces.values())
        for handle in handles:
            impl = handle._impl
            if isinstance(impl, _Timed):
                impl.core.close()
                continue
            tail = impl.close()
            if tail is None:
                continue
            def give(t: Transport, ns: str = impl.name, b: Block = tail.block,
                     lease: int = tail.lease) -> bool:
                return t.give_back(ns, b.start, b.end, b.step, lease)

            try:
                given = self._nodes.call_one(tail.node, give)
            except IdmintError:
                given = False
            impl.core.give_back_done(tail, given)
        self._nodes.close()
        _OPEN.discard(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def close_all() -> None:
    """Closes every open client (registered with `atexit`)."""
    for client in list(_OPEN):
        try:
            client.close()
        except Exception:
            pass
