"""The rules of a snowflake generator driven by a worker lease, without IO (docs/design.md
invariant 4; the same rules as idmint-core's `lease_window` and `SnowflakeGenerator`):

- time is the monotonic clock anchored to wall time when the generator starts, so a wall clock
  stepped back does not move ids back;
- the generator starts above the lease's floor and above `own_floor_ms` (every id an earlier
  generator of the same handle made), whatever the clock reads;
- it issues nothing until `renewed()`, then only timestamps below the floor the renewal
  recorded and before its send time + TTL - margin; `stop()` ends issuing for good;
- every id is made once (from any thread) and ids increase per thread; a used-up time unit
  waits (spins) for the next, never borrows from the future; `issued_below_ms()` is above every id made, the floor a release records.

The clock is injected (`Clock`: `wall_ns()` and `monotonic_ns()`), so tests step time by hand.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Callable, Iterator, Optional, Protocol

from .errors import IdmintError
from .layouts import Layout


class Clock(Protocol):
    """Wall (ns since the Unix epoch, may step) and monotonic (ns, never decreases) time."""

    def wall_ns(self) -> int: ...
    def monotonic_ns(self) -> int: ...


class SystemClock:
    """The operating system's clocks."""

    wall_ns = staticmethod(time.time_ns)
    monotonic_ns = staticmethod(time.monotonic_ns)


class BeyondLimit(IdmintError):
    """The lease does not cover the time now (not renewed up to it, or stopped)."""

    code = "lease_expired"
    retryable = True


def lock_text(layout: Layout) -> str:
    """The layout as a lease group records it (the layout lock); the Rust core's text."""
    order = "sequence_then_node" if layout.sequence_before_node else "node_then_sequence"
    return (f"timestamp_bits={layout.timestamp_bits} node_bits={layout.node_bits} "
            f"sequence_bits={layout.sequence_bits} time_unit_ns={layout.unit_nanos} "
            f"epoch_unix_ms={layout.epoch_unix_ms} order={order} max_bits={layout.max_bits}")


def _units(layout: Layout, unix_ns: int) -> int:
    return max(0, unix_ns - layout.epoch_unix_ms * 1_000_000) // layout.unit_nanos


def _unit_start_ns(layout: Layout, ts: int) -> int:
    return ts * layout.unit_nanos + layout.epoch_unix_ms * 1_000_000


def limit_after_renewal(layout: Layout, sent_at_ns: int, floor_ms: int, ttl_ns: int,
                        margin_ns: int) -> int:
    """No timestamp at or above this: below the recorded floor, before sent + TTL - margin."""
    floor_limit = _units(layout, max(0, floor_ms * 1_000_000 - 1)) + 1
    return min(floor_limit, _units(layout, max(0, sent_at_ns + ttl_ns - margin_ns)))


class Generator:
    """One worker id's ids under a lease. Thread-safe."""

    def __init__(self, layout: Layout, worker: int, floor_ms: int, clock: Clock,
                 own_floor_ms: int = 0) -> None:
        if not 0 <= worker < (1 << layout.node_bits):
            raise IdmintError(f"worker {worker} does not fit {layout.node_bits} bits",
                              "lease_refused")
        self.layout = layout
        self.worker = worker
        self._clock = clock
        self._mono: Callable[[], int] = clock.monotonic_ns
        # Wall time = monotonic + offset, fixed at start.
        self._offset = clock.wall_ns() - clock.monotonic_ns()
        self._max_seq = (1 << layout.sequence_bits) - 1
        self._max_ts = (1 << layout.timestamp_bits) - 1
        self._base = self._offset - layout.epoch_unix_ms * 1_000_000
        if layout.sequence_before_node:
            self._node_part = worker
            self._ts_shift, self._seq_shift = layout.node_bits + layout.sequence_bits, \
                layout.node_bits
        else:
            self._node_part = worker << layout.sequence_bits
            self._ts_shift, self._seq_shift = layout.node_bits + layout.sequence_bits, 0
        floor_ns = max(floor_ms, own_floor_ms) * 1_000_000
        first = _units(layout, floor_ns)
        if _unit_start_ns(layout, first) < floor_ns:
            first += 1
        # The unit before the first allowed one counts as used up.
        self._ts = first - 1
        self._unit_ns = layout.unit_nanos
        # The fast path's reading of the unit, in floating point: monotonic ns times units per
        # ns plus the units at monotonic 0. Monotone (so never a unit back); the slow path
        # decides every new unit with exact integers.
        self._per_ns = 1.0 / layout.unit_nanos
        self._units0 = self._base / layout.unit_nanos
        #: (unit, its ids, its last id): the unit being issued; none at first.
        self._unit: tuple[int, Iterator[int], int] = (-1, iter(()), -1)
        self._limit = 0
        self._lock = threading.Lock()
        #: The error raised when the limit stops issuing (the handle names the lease in it).
        self.on_limit: Callable[[], IdmintError] = lambda: BeyondLimit(
            "the worker lease does not cover the time now")

    def now_ns(self) -> int:
        """The generator's time, ns since the Unix epoch."""
        return self._mono() + self._offset

    def renewed(self, sent_at_ns: int, floor_ms: int, ttl_ns: int, margin_ns: int) -> None:
        self._limit = limit_after_renewal(self.layout, sent_at_ns, floor_ms, ttl_ns, margin_ns)

    def stop(self) -> None:
        """No id from now on: the limit goes to 0 and the current unit is dropped."""
        with self._lock:
            self._limit = 0
            self._unit = (-1, iter(()), -1)

    def issued_below_ms(self) -> int:
        return -(-_unit_start_ns(self.layout, self._ts + 1) // 1_000_000)

    def next(self) -> int:
        """The next id. Fast path: the current unit's ids come from one `itertools.count`
        (atomic under the GIL), read with the unit as one tuple; anything else (a new unit, a
        used-up one, the limit) takes the lock in `_slow`."""
        ts, ids, last = self._unit
        if (self._mono() * self._per_ns + self._units0) // 1.0 == ts:
            id_ = next(ids)
            if id_ <= last:
                return id_
        return self._slow()

    def _slow(self) -> int:
        with self._lock:
            while True:
                ts, ids, last = self._unit
                now = (self._mono() + self._base) // self._unit_ns
                if now == ts:
                    id_ = next(ids)
                    if id_ <= last:
                        return id_
                # The unit the next id would be in: now, or after the last one (a floor).
                target = max(now, self._ts + 1)
                if target > self._max_ts:
                    raise IdmintError("the layout's timestamp field ran out", "time_exhausted")
                if target >= self._limit:
                    raise self.on_limit()
                if now < target:
                    continue  # the clock is behind the last unit or the floor: spin
                first = (now << self._ts_shift) | self._node_part
                self._ts = now
                if self._seq_shift == 0:
                    # Node then sequence: a unit's ids are consecutive integers.
                    self._unit = (now, itertools.count(first), first + self._max_seq)
                else:
                    step = 1 << self._seq_shift
                    self._unit = (now, itertools.count(first, step),
                                  first + self._max_seq * step)


def floor_behind(floor_ms: int, clock: Clock, own_floor_ms: int = 0) -> Optional[int]:
    """How many ms the clock is behind `floor_ms` (None if not behind)."""
    now = max(clock.wall_ns() // 1_000_000, own_floor_ms)
    return floor_ms - now if now < floor_ms else None
