"""A snowflake, UUIDv7 or ULID namespace's ids on the client: batches fetched with `Next`,
handed out only while fresh. No I/O here: the clients fetch and report back.

Invariants:
- only ids a node returned are handed out, each once, increasing per client: an id not above
  every id held before (another node's, after a failover) is dropped;
- validity: a batch is stamped with the monotonic clock read before its request was sent, and
  its ids are handed out only until `stamp + validity`; older ones are dropped (`expired`);
- batch size starts at 16, doubles (up to `max_batch`) when a batch was used up with nothing
  expiring, halves when ids expired.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Optional

from .errors import Closed
from .sequence import Stats
from .types import Id

FIRST_BATCH = 16


class TimedCore:
    """See the module docs. Thread-safe."""

    def __init__(self, name: str, kind: str, validity_s: float, max_batch: int,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.name = name
        self.kind = kind
        self.validity_ns = int(validity_s * 1e9)
        self.max_batch = max_batch
        self.clock = clock
        self.lock = threading.Lock()
        #: One fetch at a time; a caller that finds the queue empty fetches under it.
        self.fetch_lock = threading.Lock()
        self.batches: deque[tuple[int, deque[Id]]] = deque()
        #: Ids of one kind compare as their numbers: ints, UUIDs (by value), canonical ULID text.
        self.highest: Optional[Any] = None
        self.batch = FIRST_BATCH
        self.closed = False
        self.served = self.expired = self.discarded = self.refills = self.waits = 0
        self.expired_at_fetch = 0

    def take(self, max_ids: int) -> list[Id]:
        """Up to `max_ids` fresh ids. Raises `Closed`."""
        now = self.clock()
        out: list[Id] = []
        with self.lock:
            if self.closed:
                raise Closed(f"the client is closed (namespace {self.name})")
            while self.batches and len(out) < max_ids:
                stamp, ids = self.batches[0]
                if now > stamp + self.validity_ns:
                    self.expired += len(ids)
                    self.batches.popleft()
                    continue
                while ids and len(out) < max_ids:
                    out.append(ids.popleft())
                if not ids:
                    self.batches.popleft()
            self.served += len(out)
            if not out:
                self.waits += 1
        return out

    def fetch_size(self) -> int:
        with self.lock:
            return self.batch

    def accept(self, ids: list[Id], stamp: int, queue: bool) -> list[Id]:
        """A fetched batch (requested at `stamp`): the ids above every id held; queued when
        `queue`, else returned (a caller's batch) and counted served."""
        with self.lock:
            if self.closed:
                raise Closed(f"the client is closed (namespace {self.name})")
            kept: list[Id] = []
            for id_ in ids:
                if self.highest is not None and id_ <= self.highest:
                    self.discarded += 1
                    continue
                self.highest = id_
                kept.append(id_)
            self.refills += 1
            if queue:
                if self.expired > self.expired_at_fetch:
                    self.batch = max(1, self.batch // 2)
                elif not self.batches:
                    self.batch = min(self.max_batch, self.batch * 2)
                self.expired_at_fetch = self.expired
                if kept:
                    self.batches.append((stamp, deque(kept)))
                return []
            self.served += len(kept)
            return kept

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.discarded += sum(len(ids) for _, ids in self.batches)
            self.batches.clear()

    def stats(self) -> Stats:
        with self.lock:
            buffered = sum(len(ids) for _, ids in self.batches)
            return Stats(buffered=buffered, served=self.served, burned=self.discarded,
                         given_back=0, expired=self.expired, refills=self.refills,
                         refill_failures=0, waits=self.waits, demand_per_sec=0.0,
                         next_fetch=self.batch, last_error=None, kind=self.kind)
