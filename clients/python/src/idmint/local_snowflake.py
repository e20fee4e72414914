"""`LocalSnowflake`: snowflake ids made in this process under a worker id leased from the nodes
(`Client.local_snowflake(name)`, docs/clients.md "Local snowflake ids").

The handle leases a worker id of the namespace's lease group over gRPC (`AcquireWorker`; the
pool the nodes' own workers lease from, so nodes and handles never share one; the token needs
the `workers` scope), renews it from a background thread, and makes ids with
`snowflake_rules.Generator`:

- nothing below a floor: the generator starts above the lease's floor; a floor more than
  `max_floor_wait` ahead of the clock is refused (`clock_behind_floor`), a nearer one waited for;
- nothing above a recorded floor nor after the lease could expire: every renewal records a
  floor `floor_ahead` ahead and the generator stops there and at the renewal's send time +
  TTL - `safety_margin` (`lease_expired`, retryable, naming the last renewal's failure);
- a lease lost (`superseded`) is never used again: the thread leases anew, above every id made;
- the acquisition names the layout's text: a group recording another is refused
  (`layout_conflict`) before any id is made;
- `close()` (also on leaving a `with` block) stops issuing and the thread, then releases the
  lease with a floor above the last id.

Lease calls exist over gRPC only (they are the nodes' lease protocol): a client with HTTP urls
alone cannot lease (`InvalidRequest`).
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from .errors import Closed, IdmintError, InvalidRequest, NodeError, Unavailable, WrongKind
from .grpc_transport import GrpcTransport
from .layouts import Layout
from .nodes import FAILOVER_CODES
from .snowflake_rules import BeyondLimit, Clock, Generator, SystemClock, floor_behind, lock_text
from .types import NamespaceInfo
from .v1 import idmint_pb2 as pb

_MS = 1_000_000


@dataclass(frozen=True)
class LocalSnowflakeConfig:
    """Lease settings (seconds); the defaults are the nodes' `[leases]` defaults. `layout`:
    the layout to make ids with (None: the namespace's). `clock`: injected time (tests)."""

    ttl: float = 10.0
    floor_ahead: float = 5.0
    safety_margin: float = 2.0
    max_floor_wait: float = 2.0
    layout: Optional[Layout] = None
    clock: Optional[Clock] = None

    def check(self) -> None:
        if not (self.ttl >= 0.01 and 0 < self.floor_ahead < self.ttl
                and self.safety_margin < self.ttl / 2):
            raise InvalidRequest("local snowflake: need ttl >= 0.01 s, 0 < floor_ahead < ttl "
                                 "and safety_margin < ttl / 2")


@dataclass(frozen=True)
class _Lease:
    group: str
    worker: int
    token: int
    floor_ms: int
    ttl_ms: int
    holder: str

    def wire(self) -> Any:
        return pb.WorkerLease(group=self.group, worker=self.worker, token=self.token,
                              floor_unix_ms=self.floor_ms, ttl_ms=self.ttl_ms, holder=self.holder)


_REFUSALS = {
    pb.LeaseRefused.LAYOUT_CONFLICT: ("layout_conflict", False),
    pb.LeaseRefused.POOL_FULL: ("worker_pool_full", False),
    pb.LeaseRefused.SUPERSEDED: ("lease_superseded", False),
}


def _lease_of(group: str, answer: Any) -> _Lease:
    which = answer.WhichOneof("outcome")
    if which == "lease" and answer.lease.group == group and answer.lease.token:
        l = answer.lease
        return _Lease(l.group, l.worker, l.token, l.floor_unix_ms, l.ttl_ms, l.holder)
    if which == "refused":
        code, _ = _REFUSALS.get(answer.refused.reason, ("lease_refused", False))
        raise IdmintError(answer.refused.message, code)
    raise NodeError(f"a lease answer for group {group!r} with neither a lease nor a refusal")


def layout_of(info: NamespaceInfo) -> tuple[str, Layout]:
    """The lease group and layout of a snowflake namespace whose worker ids are leased."""
    name = info.namespace
    if info.kind != "snowflake":
        raise WrongKind(f"namespace {name} is {info.kind}: local ids are snowflake ids")
    snowflake = info.details.get("snowflake", {})
    if snowflake.get("shards") is not None:
        raise WrongKind(f"namespace {name} has shards = \"owned\": its node field is the "
                        "data's shard, never leased to a client")
    pool = snowflake.get("worker_pool")
    if not pool:
        raise WrongKind(f"namespace {name} has a fixed worker id on an authority that stores "
                        "no leases: there is no pool to lease a worker id from")
    l = snowflake.get("layout", {})
    unit, max_bits = int(l.get("time_unit_ns", 0)), int(l.get("max_bits", 0))
    if not unit or not max_bits:
        raise NodeError("the node does not describe the layout's time unit and bit limit (an "
                        "older node): pass LocalSnowflakeConfig(layout=...)")
    layout = Layout("namespace", int(l["timestamp_bits"]), int(l["node_bits"]),
                    int(l["sequence_bits"]), unit, int(l["epoch_unix_ms"]),
                    l.get("order") == "FIELD_ORDER_SEQUENCE_THEN_NODE", max_bits)
    return str(pool["group"]), layout


class _Lessor:
    """The lease calls, over the client's gRPC nodes in order, moving on as `Nodes` does."""

    def __init__(self, transports: Sequence[GrpcTransport]) -> None:
        if not transports:
            raise InvalidRequest("local snowflake ids need a gRPC node url: the worker-lease "
                                 "calls exist over gRPC only")
        self.transports = list(transports)
        self.current = 0

    def _call(self, method: str, request: Any) -> Any:
        error: Optional[IdmintError] = None
        n = len(self.transports)
        for i in range(n):
            t = self.transports[(self.current + i) % n]
            try:
                answer = t._call(getattr(t.stub, method), request)
            except IdmintError as e:
                if e.code not in FAILOVER_CODES:
                    raise
                error = e
                continue
            self.current = (self.current + i) % n
            return answer
        raise error or Unavailable("no node")

    def acquire(self, group: str, workers: int, prefer_floor_at_most: int, holder: str,
                layout: str, ttl_ms: int) -> _Lease:
        return _lease_of(group, self._call("AcquireWorker", pb.AcquireWorkerRequest(
            group=group, workers=workers, prefer_floor_at_most=prefer_floor_at_most,
            holder=holder, layout=layout, ttl_ms=ttl_ms)))

    def renew(self, lease: _Lease, floor_ms: int) -> _Lease:
        return _lease_of(lease.group, self._call("RenewWorker", pb.RenewWorkerRequest(
            lease=lease.wire(), floor_unix_ms=floor_ms)))

    def release(self, lease: _Lease, floor_ms: int) -> None:
        _lease_of(lease.group, self._call("ReleaseWorker", pb.RenewWorkerRequest(
            lease=lease.wire(), floor_unix_ms=floor_ms)))


class LocalSnowflake:
    """Snowflake ids made in this process under a leased worker id. Use as a context manager,
    or call `close()`.

    `next()`: the next id, made in the process (no network); thread-safe, each id made once,
    increasing per thread. Raises `lease_expired` (retryable) when the lease is not renewed up
    to now, `lease_lost` until a lost one is replaced, `Closed` after `close()`."""

    next: Callable[[], int]

    def __init__(self, name: str, group: str, layout: Layout, transports: Sequence[GrpcTransport],
                 config: LocalSnowflakeConfig) -> None:
        config.check()
        self.name = name
        self.layout = config.layout or layout
        self._config = config
        self._clock: Clock = config.clock or SystemClock()
        self._lessor = _Lessor(transports)
        self._group = group
        self._text = lock_text(self.layout)
        self._holder = f"python pid {os.getpid()} local {name}"
        self._lock = threading.Lock()
        self._closed = False
        self._lost = False
        self._last_error: Optional[str] = None
        self._stopping = threading.Event()
        self._renew_soon = threading.Event()
        self._lease, self._generator = self._take_lease(0)
        self._install(self._generator)
        self._thread = threading.Thread(target=self._keep, name=f"idmint-lease-{name}",
                                        daemon=True)
        self._thread.start()

    @property
    def worker(self) -> int:
        return self._generator.worker

    def _not_issuing(self) -> IdmintError:
        if self._closed:
            return Closed("the local snowflake generator is closed")
        last = f"; last renewal: {self._last_error}" if self._last_error else ""
        if self._lost:
            return Unavailable(f"the worker lease of namespace {self.name} was lost (taken "
                               f"over); not issuing until a new one is leased{last}",
                               "lease_lost")
        self._renew_soon.set()
        return BeyondLimit(f"the worker lease of namespace {self.name} is not renewed up to "
                           "now (the nodes did not answer for longer than the lease covers); "
                           f"not issuing, as another process may lease the worker id{last}")

    def _install(self, generator: Generator) -> None:
        """Makes `generator` the one `next` calls (bound directly: no wrapper per id)."""
        generator.on_limit = self._not_issuing
        self._generator = generator
        self.next = generator.next

    def _take_lease(self, own_floor_ms: int) -> tuple[_Lease, Generator]:
        c = self._config
        now_ms = self._clock.wall_ns() // _MS
        lease = self._lessor.acquire(self._group, 1 << self.layout.node_bits,
                                     now_ms + int(c.max_floor_wait * 1000), self._holder,
                                     self._text, int(c.ttl * 1000))
        behind = floor_behind(lease.floor_ms, self._clock, own_floor_ms)
        waited = 0.0
        while behind is not None:
            if behind > c.max_floor_wait * 1000 or waited > c.max_floor_wait:
                try:
                    self._lessor.release(lease, lease.floor_ms)
                except IdmintError:
                    pass
                raise IdmintError(
                    f"worker {lease.worker} of group {lease.group} has issued ids up to "
                    f"{lease.floor_ms} ms since the Unix epoch (its floor), but this clock is "
                    f"{behind} ms behind: it may have been stepped back. Not issuing",
                    "clock_behind_floor")
            pause = min(behind / 1000, 0.1)
            self._stopping.wait(pause)
            waited += pause
            behind = floor_behind(lease.floor_ms, self._clock, own_floor_ms)
        generator = Generator(self.layout, lease.worker, lease.floor_ms, self._clock, own_floor_ms)
        try:
            lease = self._renew(lease, generator)
        except IdmintError:
            try:
                self._lessor.release(lease, lease.floor_ms)
            except IdmintError:
                pass
            raise
        return lease, generator

    def _renew(self, lease: _Lease, generator: Generator) -> _Lease:
        sent = generator.now_ns()
        floor = sent // _MS + int(self._config.floor_ahead * 1000)
        renewed = self._lessor.renew(lease, floor)
        generator.renewed(sent, renewed.floor_ms, renewed.ttl_ms * _MS,
                          int(self._config.safety_margin * 1e9))
        self._last_error = None
        return replace(lease, floor_ms=renewed.floor_ms)

    def _keep(self) -> None:
        c = self._config
        period = min(c.ttl / 3, c.floor_ahead / 2)
        retry = max(c.ttl / 10, 0.01)
        pause = retry / 8
        wait = period
        while not self._stopping.is_set():
            self._renew_soon.wait(wait)
            self._renew_soon.clear()
            if self._stopping.is_set():
                return
            try:
                if self._lost:
                    lease, generator = self._take_lease(self._generator.issued_below_ms())
                    with self._lock:
                        if self._stopping.is_set():
                            generator.stop()
                            self._lessor.release(lease, generator.issued_below_ms())
                            return
                        self._lease, self._lost = lease, False
                        self._install(generator)
                else:
                    self._lease = self._renew(self._lease, self._generator)
                wait, pause = period, retry / 8
            except IdmintError as e:
                if e.code == "lease_superseded":
                    self._generator.stop()
                    self._lost = True
                self._last_error = str(e)
                pause = min(retry, pause * 2)
                wait = pause * (1 - random.random() / 2)

    def close(self) -> None:
        """Stops issuing and the renewals, then releases the lease with a floor above the
        last id (the next holder of the worker id starts above it). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stopping.set()
            self._renew_soon.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        self._generator.stop()
        if self._lost:
            return
        floor = max(self._generator.issued_below_ms(), self._lease.floor_ms)
        try:
            self._lessor.release(self._lease, floor)
        except IdmintError:
            pass  # the lease expires by itself; its floor recorded ahead stays

    def __enter__(self) -> "LocalSnowflake":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_local(name: str, info: NamespaceInfo, transports: Sequence[Any],
               config: Optional[LocalSnowflakeConfig]) -> LocalSnowflake:
    """A handle on `info`'s namespace over the gRPC ones of `transports`."""
    grpc_nodes = [t for t in transports if isinstance(t, GrpcTransport)]
    if not grpc_nodes:
        raise InvalidRequest("local snowflake ids need a gRPC node url: the worker-lease "
                             "calls exist over gRPC only")
    group, layout = layout_of(info)
    return LocalSnowflake(name, group, layout, grpc_nodes, config or LocalSnowflakeConfig())

