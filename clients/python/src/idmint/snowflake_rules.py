"""The rules of a snowflake generator driven by a worker lease, without IO (docs/design.md
invariant 4; the same rules as idmint-core's `lease_window` and `SnowflakeGenerator`):

- time is the monotonic clock anchored to wall time when the generator starts, so a wall clock
  stepped back does not move ids back;
- the generator starts above the lease's floor and above `own_floor_ms` (every id an earlier
  generator of the same handle made), whatever the clock reads;
- it issues nothing until `renewed()`, then only timestamps below the floor the renewal
  recorded and before its send time + TTL - margin; `stop()` ends issuing for good;
- ids strictly increase; a used-up time unit waits (spins) for the next, never borrows from the
  future; `issued_below_ms()` is above every id made, the floor a release records.

The clock is injected (`Clock`: `wall_ns()` and `monotonic_ns()`), so tests step time by hand.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol

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
        self._seq_bits = layout.sequence_bits
        self._max_seq = (1 << layout.sequence_bits) - 1
        self._max_ts = (1 << layout.timestamp_bits) - 1
        self._unit = layout.unit_nanos
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
        self._seq = self._max_seq
        self._limit = 0
        self._lock = threading.Lock()

    def now_ns(self) -> int:
        """The generator's time, ns since the Unix epoch."""
        return self._mono() + self._offset

    def renewed(self, sent_at_ns: int, floor_ms: int, ttl_ns: int, margin_ns: int) -> None:
        self._limit = limit_after_renewal(self.layout, sent_at_ns, floor_ms, ttl_ns, margin_ns)

    def stop(self) -> None:
        self._limit = 0

    def issued_below_ms(self) -> int:
        return -(-_unit_start_ns(self.layout, self._ts + 1) // 1_000_000)

    def next(self) -> int:
        with self._lock:
            ts, seq = self._ts, self._seq + 1
            while True:
                now = (self._mono() + self._base) // self._unit
                if now > ts:
                    ts, seq = now, 0
                    break
                if seq <= self._max_seq:
                    break
            if ts >= self._limit or ts > self._max_ts:
                if ts > self._max_ts:
                    raise IdmintError("the layout's timestamp field ran out", "time_exhausted")
                raise BeyondLimit("the worker lease does not cover the time now")
            self._ts, self._seq = ts, seq
            return (ts << self._ts_shift) | (seq << self._seq_shift) | self._node_part


def floor_behind(floor_ms: int, clock: Clock, own_floor_ms: int = 0) -> Optional[int]:
    """How many ms the clock is behind `floor_ms` (None if not behind)."""
    now = max(clock.wall_ns() // 1_000_000, own_floor_ms)
    return floor_ms - now if now < floor_ms else None
