"""A sequence namespace's ids on the client: the block buffer fed with blocks leased from
nodes, a shared window for `next`, chunks for one-owner handles, batches, and the close that
hands the newest block's unused tail back. No I/O here: the sync and asyncio clients do the
calls and the waiting, and report back.

Invariants:
- only ids of blocks a node granted are handed out, and only blocks of the namespace (its step,
  a residue class the node's authority grants, within its width): `check`;
- ids leave in increasing order per client: every take from the buffer (a window, a chunk, a
  batch, the close) retires the window first, whose unclaimed tail goes back in front;
- the window is a `range` iterator: with the GIL, `next()` on it is one C call, so threads
  claim its ids without a lock and each id once; retiring it drains it in one C call
  (`list()`), so an id is claimed either by a thread or by the retirement, never both. On a
  free-threaded build every claim takes the lock;
- `begin_close` stops every take; the newest lease's unused tail is what may go back, with its
  lease, to the node that leased it. A refill asks its node to extend the newest lease
  (`extends`); a node that granted the block right after it answers a lease covering both
  (`lease_start`), so the older block's unused ids go back too. Other unused ids are burned;
- `received == served + buffered + burned + given_back` (the buffer's counters, the window's
  and chunks' unclaimed ids counting as served until they come back).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from .buffer import Block, Buffer, BufferPolicy
from .errors import Closed, IdmintError, NodeError
from .types import Leased, SequenceSpec

#: Whether next() on a shared iterator is atomic (the GIL).
GIL = getattr(sys, "_is_gil_enabled", lambda: True)()
_EMPTY: Iterator[int] = iter(range(0))


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Tail:
    """What `close` gives back: the ids and the lease of the node at `node`. As the newest
    lease, `block` is every id the lease covers that this client received."""

    block: Block
    lease: int
    node: int


@dataclass(frozen=True)
class Stats:
    """Counters of a namespace on this client (`received = served + buffered + burned +
    given_back` for sequence namespaces; `expired` for time-ordered ones)."""

    buffered: int
    served: int
    burned: int
    given_back: int
    expired: int
    refills: int
    refill_failures: int
    waits: int
    demand_per_sec: float
    next_fetch: int
    last_error: Optional[str]
    #: The namespace's kind: sequence, snowflake, uuid7 or ulid.
    kind: str = "sequence"


def check_block(spec: SequenceSpec, leased: Leased) -> Block:
    """`leased` as a block of the namespace, or `NodeError`."""
    ok = (leased.step == spec.step and leased.start < leased.end and leased.step >= 1
          and leased.start % leased.step in spec.residues)
    block = Block(leased.start, leased.end, leased.step)
    if not ok or block.last() > spec.max_id:
        raise NodeError(f"the node granted [{leased.start}, {leased.end}) step {leased.step}: "
                        "not a block of the namespace; not used")
    return block


class SequenceCore:
    """See the module docs. Every method is thread-safe."""

    def __init__(self, name: str, spec: SequenceSpec, policy: BufferPolicy) -> None:
        self.name = name
        self.spec = spec
        self.lock = threading.Lock()
        self.buffer = Buffer(policy)
        self.window: Iterator[int] = _EMPTY
        self.window_generation: Optional[int] = None
        self.newest: Optional[Tail] = None
        #: The highest end of a block granted, sent as `min_start`: a node whose buffer holds
        #: ids below it (another node's older buffer, after a failover) grants a fresh block
        #: above instead, so nothing is burned here.
        self.floor: Optional[int] = None
        self.closed = False
        self.shortfall = False
        #: Refills ended (either way), and how many failed: waiters watch them.
        self.events = 0
        self.failures = 0
        self.last_error: Optional[IdmintError] = None
        self.waits = 0
        self.late_burned = 0
        #: Called when the refill should look now; set by the client that runs the refills.
        self.wake: Callable[[], None] = _nothing

    def window_len(self) -> int:
        return max(1, min(65_536, self.buffer.target_block() // 8))

    # Taking ids.
    def try_next(self) -> Optional[int]:
        """The next id without waiting; None when the buffer is empty. Raises `Closed`."""
        if GIL:
            got = next(self.window, None)
            if got is not None:
                return got
        with self.lock:
            if self.closed:
                raise Closed(f"the client is closed (namespace {self.name})")
            got = next(self.window, None)
            if got is not None:
                return got
            block = self._take(self.window_len())
            if block is None:
                return None
            self.window = iter(range(block.start, block.end, block.step))
            self.window_generation = self.buffer.generation
            return next(self.window)

    def take_chunk(self) -> Optional[tuple[Block, int]]:
        """A window's length of ids for one owner, with the generation that can put its tail
        back; None when empty. Raises `Closed`."""
        with self.lock:
            if self.closed:
                raise Closed(f"the client is closed (namespace {self.name})")
            block = self._take(self.window_len())
            return None if block is None else (block, self.buffer.generation)

    def return_chunk(self, tail: Block, generation: int) -> None:
        """An owner's unused chunk tail: back in front if nothing was taken since, else burned."""
        with self.lock:
            if self.closed:
                self.buffer.served -= len(tail)
                self.late_burned += len(tail)
                return
            self._retire_window()
            self.buffer.put_back([tail], generation)

    def take_batch(self, max_ids: int) -> tuple[list[Block], Optional[int]]:
        """Up to `max_ids` ids as blocks, and the generation after the last take (for
        `put_back`). Raises `Closed`."""
        with self.lock:
            if self.closed:
                raise Closed(f"the client is closed (namespace {self.name})")
            blocks: list[Block] = []
            want = max_ids
            while want > 0:
                block = self._take(want)
                if block is None:
                    break
                blocks.append(block)
                want -= len(block)
            return blocks, self.buffer.generation if blocks else None

    def put_back(self, blocks: list[Block], generation: Optional[int]) -> None:
        """A failed batch's ids: back in front if nothing was taken since, else burned."""
        with self.lock:
            if self.closed:
                ids = sum(len(b) for b in blocks)
                self.buffer.served -= ids
                self.late_burned += ids
                return
            self.buffer.put_back(blocks, generation)

    def _take(self, max_ids: int) -> Optional[Block]:
        self._retire_window()
        block = self.buffer.take(max_ids)
        if block is None:
            self.shortfall = True
            self.waits += 1
            self.wake()
        elif self.buffer.wants_refill():
            self.wake()
        return block

    def _retire_window(self) -> None:
        rest = list(self.window)  # one C call: no thread claims an id of it after this
        self.window = _EMPTY
        if rest:
            step = self.spec.step
            self.buffer.put_back([Block(rest[0], rest[-1] + step, step)], self.window_generation)

    # Refills.
    def plan_refill(self, now_ns: int) -> Optional[int]:
        """How many ids to ask for, if a refill is due (one in flight at a time)."""
        with self.lock:
            if self.closed:
                return None
            # The window's unclaimed ids are not demand: only ids handed out are.
            unclaimed = self.window.__length_hint__()  # type: ignore[attr-defined]
            return self.buffer.start_refill(now_ns, force=self.shortfall, unclaimed=unclaimed)

    def extends(self) -> Optional[int]:
        """The newest lease, for a refill to extend (`BlockRequest.extends`)."""
        newest = self.newest
        return newest.lease if newest is not None and newest.lease else None

    def refill_done(self, leased: Leased, node: int) -> None:
        with self.lock:
            try:
                block = check_block(self.spec, leased)
            except NodeError as e:
                self._failed(e)
                raise
            self.shortfall = False
            if self.closed:  # a refill that ended after the close: never used
                self.buffer.refill_failed()
                self.buffer.received += len(block)
                self.buffer.burned += len(block)
                self.events += 1
                return
            self.floor = max(self.floor or 0, block.end)
            kept = self.buffer.push(block)
            prev, self.newest = self.newest, None
            if kept is not None:
                covered = kept
                joined = (prev is not None and prev.node == node and kept == block
                          and 0 < leased.lease_start < block.start
                          and prev.block.end == block.start and prev.block.step == block.step)
                if joined and prev is not None:
                    start = max(leased.lease_start, prev.block.start)
                    covered = Block(start, block.end, block.step)
                self.newest = Tail(covered, leased.lease, node)
            self.events += 1

    def refill_failed(self, error: IdmintError) -> None:
        with self.lock:
            self._failed(error)

    def _failed(self, error: IdmintError) -> None:
        self.buffer.refill_failed()
        self.failures += 1
        self.events += 1
        self.last_error = error

    # Closing.
    def begin_close(self) -> Optional[Tail]:
        """Stops every take; returns the newest block's unused tail to give back (the rest of
        the buffer is burned), or None."""
        with self.lock:
            if self.closed:
                return None
            self.closed = True
            self._retire_window()
            tail = self.buffer.take_unused_tail()
            newest, self.newest = self.newest, None
            if tail is None:
                return None
            if newest is None or newest.lease == 0 or newest.block.end != tail.end:
                self.buffer.burned += len(tail)
                return None
            part = tail if tail.start >= newest.block.start else newest.block
            self.buffer.burned += len(tail) - len(part)
            return Tail(part, newest.lease, newest.node)

    def give_back_done(self, tail: Tail, given_back: bool) -> None:
        with self.lock:
            if given_back:
                self.buffer.given_back += len(tail.block)
            else:
                self.buffer.burned += len(tail.block)

    def stats(self) -> Stats:
        with self.lock:
            b = self.buffer
            in_window = self.window.__length_hint__()  # type: ignore[attr-defined]
            return Stats(buffered=b.buffered + in_window, served=b.served - in_window,
                         burned=b.burned + self.late_burned, given_back=b.given_back,
                         expired=0, refills=b.refills, refill_failures=self.failures,
                         waits=self.waits, demand_per_sec=b.rate,
                         next_fetch=b.target_block(),
                         last_error=str(self.last_error) if self.last_error else None)
