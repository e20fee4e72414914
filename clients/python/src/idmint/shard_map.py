"""Which node to send a shard's request to first: the shard map of each shard-owned namespace
(`state.shards` over HTTP, `SnowflakeInfo.shards` over gRPC; docs/api.md), learned from the
nodes and cached, so a request goes to the node holding its shard's range and is served there
without a forward.

Invariants:
- The map only picks the node tried first; the nodes' usual failover follows, so a wrong or
  missing map costs a forward, never an answer.
- Learning a map asks every configured node for the namespace's info at once: each answer's
  `this_node` says which configured node has which advertise url, the ranges come from any
  answer. A holder that is not a configured node, or a range nobody holds, has no node: the
  usual order. A failed or partial fetch never fails a request.
- One entry per namespace; a namespace that is not shard-owned (or unknown) is remembered as
  such for the refresh period, and not asked about again meanwhile.
- The first routed request of a namespace waits for the fetch; a map older than the refresh
  period is refreshed in the background by the next routed request, at most one fetch per
  namespace in flight. A chosen node that failed (no answer, `no_leader`) loses its range
  until the next fetch, which is due at once.
- Entries change under one lock, held to read or update, never across a call to a node.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from .types import AsyncTransport, NamespaceInfo, Transport

#: Seconds a map is used before the next routed request refreshes it.
REFRESH_S = 10.0


@dataclass(frozen=True)
class Choice:
    """The node a routed request goes to first, and the range that chose it."""

    node: int
    range: int


@dataclass(frozen=True)
class Routes:
    """A namespace's shards and the configured node (by index) holding each range."""

    logical_shards: int
    shard_range: int
    holders: Mapping[int, int]

    @staticmethod
    def from_answers(answers: Sequence[tuple[int, Mapping[str, Any]]]) -> Optional["Routes"]:
        """The routes of the maps the configured nodes answered (`(node index, map)`, the map
        as docs/api.md writes `state.shards`): node `i` holds the ranges whose holder is its
        `this_node`; the ranges are the first answer's that read the authority (else the
        first's). None without an answer, or with shard counts no node could serve."""
        if not answers:
            return None
        base = next((m for _, m in answers if not m.get("error")), answers[0][1])
        logical, per_range = int(base.get("logical_shards") or 0), int(base.get("shard_range") or 0)
        if logical <= 0 or per_range <= 0:
            return None
        by_url: dict[str, int] = {}
        for node, m in answers:
            url = m.get("this_node")
            if url:
                by_url.setdefault(str(url), node)
        holders = {int(r["range"]): by_url[str(r.get("holder"))]
                   for r in base.get("ranges") or () if str(r.get("holder")) in by_url}
        return Routes(logical, per_range, holders)

    def shard_of(self, shard: Optional[int], key: Optional[int]) -> int:
        """The shard named: `shard`, else `key % logical_shards`."""
        return shard if shard is not None else int(key or 0) % self.logical_shards

    def choose(self, shard: Optional[int], key: Optional[int]) -> Optional[Choice]:
        """The configured node holding the shard's range, if one does (a shard out of range
        has none: the node answers `invalid_request`)."""
        s = self.shard_of(shard, key)
        if not 0 <= s < self.logical_shards:
            return None
        node = self.holders.get(s // self.shard_range)
        return None if node is None else Choice(node, s // self.shard_range)


def shard_map_of(info: NamespaceInfo) -> Optional[Mapping[str, Any]]:
    """The shard map of a node's answer, HTTP (`state.shards`) or gRPC (`snowflake.shards`);
    None for a namespace that is not shard-owned."""
    d = info.details
    holder = d.get("state") if "state" in d else d.get("snowflake")
    shards = holder.get("shards") if isinstance(holder, Mapping) else None
    return shards if isinstance(shards, Mapping) else None


@dataclass
class Entry:
    """What is known of one namespace."""

    learned_at: Optional[float] = None
    routes: Optional[Routes] = None
    fetching: bool = False
    #: A chosen node failed since the latest fetch: the next routed request fetches again.
    due: bool = False

    def plan(self, now: float, refresh: float) -> str:
        """`use` the routes, `fetch` (and wait), or `refresh` (use the routes meanwhile);
        marks a fetch in flight when it starts one."""
        if self.fetching:
            return "use"
        if self.learned_at is None or self.due or now - self.learned_at >= refresh:
            first = self.learned_at is None
            self.fetching, self.due = True, False
            return "fetch" if first else "refresh"
        return "use"

    def forget(self, choice: Choice) -> None:
        """`choice.node` failed: its range goes by the usual order until the next fetch, due
        at once."""
        if self.routes is not None and self.routes.holders.get(choice.range) == choice.node:
            holders = {r: n for r, n in self.routes.holders.items() if r != choice.range}
            self.routes = Routes(self.routes.logical_shards, self.routes.shard_range, holders)
        self.due = True


@dataclass
class _Maps:
    """The entries, shared by the sync and asyncio routers."""

    nodes: int
    refresh: float = REFRESH_S
    clock: Callable[[], float] = time.monotonic
    entries: dict[str, Entry] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def plan(self, namespace: str) -> tuple[str, Optional[Routes]]:
        with self.lock:
            entry = self.entries.setdefault(namespace, Entry())
            return entry.plan(self.clock(), self.refresh), entry.routes

    def learned(self, namespace: str, answers: list[tuple[int, Mapping[str, Any]]]) -> \
            Optional[Routes]:
        routes = Routes.from_answers(sorted(answers, key=lambda a: a[0]))
        with self.lock:
            entry = self.entries.setdefault(namespace, Entry())
            entry.fetching, entry.learned_at, entry.routes = False, self.clock(), routes
        return routes

    def failed(self, namespace: str, choice: Choice) -> None:
        """`choice.node` failed a request of `namespace` in a way another node may not have."""
        with self.lock:
            entry = self.entries.get(namespace)
            if entry is not None:
                entry.forget(choice)


def _map_of(info: Any) -> Optional[Mapping[str, Any]]:
    return shard_map_of(info) if isinstance(info, NamespaceInfo) else None


class ShardMaps(_Maps):
    """The routing of a sync `Client`: `choose` the node to try first."""

    def choose(self, namespace: str, shard: Optional[int], key: Optional[int],
               transports: Sequence[Transport]) -> Optional[Choice]:
        if self.nodes < 2:
            return None
        plan, routes = self.plan(namespace)
        if plan == "fetch":
            routes = self._fetch(namespace, transports)
        elif plan == "refresh":
            threading.Thread(target=self._fetch, args=(namespace, transports),
                             name=f"idmint-shard-map-{namespace}", daemon=True).start()
        return routes.choose(shard, key) if routes is not None else None

    def _fetch(self, namespace: str, transports: Sequence[Transport]) -> Optional[Routes]:
        def ask(node: int) -> Optional[tuple[int, Mapping[str, Any]]]:
            try:
                found = _map_of(transports[node].info(namespace))
            except Exception:  # no answer from this node: nothing to learn from it
                return None
            return None if found is None else (node, found)

        answers: list[tuple[int, Mapping[str, Any]]] = []
        try:
            with ThreadPoolExecutor(max_workers=len(transports)) as pool:
                answers = [a for a in pool.map(ask, range(len(transports))) if a is not None]
        finally:
            routes = self.learned(namespace, answers)
        return routes


class AsyncShardMaps(_Maps):
    """The routing of an `AsyncClient`: `choose` the node to try first."""

    def __init__(self, nodes: int, refresh: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(nodes, refresh, clock)
        self._tasks: set["asyncio.Task[Optional[Routes]]"] = set()

    async def choose(self, namespace: str, shard: Optional[int], key: Optional[int],
                     transports: Sequence[AsyncTransport]) -> Optional[Choice]:
        if self.nodes < 2:
            return None
        plan, routes = self.plan(namespace)
        if plan == "fetch":
            routes = await self._fetch(namespace, transports)
        elif plan == "refresh":
            task = asyncio.get_running_loop().create_task(self._fetch(namespace, transports))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return routes.choose(shard, key) if routes is not None else None

    async def _fetch(self, namespace: str,
                     transports: Sequence[AsyncTransport]) -> Optional[Routes]:
        answers: list[tuple[int, Mapping[str, Any]]] = []
        try:
            infos = await asyncio.gather(*(t.info(namespace) for t in transports),
                                         return_exceptions=True)
            for node, info in enumerate(infos):
                found = _map_of(info)
                if found is not None:
                    answers.append((node, found))
        finally:
            routes = self.learned(namespace, answers)
        return routes
