"""The leased-block buffer of a sequence namespace: blocks from nodes, handed out in order,
sized from demand. Pure bookkeeping, no I/O and no lock: the owner (`sequence.SequenceCore`)
holds its lock around every call.

Invariants (the node's `idmint_core::Buffer`, whose policy this follows):
- ids leave each once, increasing per residue class: a block is kept only above every id the
  buffer received of its class (`push` cuts a block from another node to the part above, the
  rest is burned);
- a take can be undone (`put_back`) only while nothing was taken since (`generation`); else its
  ids are burned, never handed out again;
- every id received is served, buffered, burned or given back:
  `received == served + buffered + burned + given_back`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple, Optional

#: Rates measured over less than this are too noisy to size a block from.
_RECENT_MIN_NS = 10_000_000


class Block(NamedTuple):
    """The ids start, start + step, ... below end."""

    start: int
    end: int
    step: int

    def __len__(self) -> int:
        return (self.end - self.start + self.step - 1) // self.step

    def last(self) -> int:
        return self.start + (len(self) - 1) * self.step

    def split(self, n: int) -> tuple["Block", Optional["Block"]]:
        """The first `n` ids (n >= 1) and the rest, if any."""
        cut = self.start + n * self.step
        if cut >= self.end:
            return self, None
        return Block(self.start, cut, self.step), Block(cut, self.end, self.step)


@dataclass(frozen=True)
class BufferPolicy:
    """How blocks are sized. `fixed_block` set: always that many ids; otherwise blocks hold
    `buffer_seconds` of the demand, from `min_block` to `max_block`. A refill starts below
    `low_water` of a block. Demand is averaged over `demand_window_s`."""

    buffer_seconds: float = 10.0
    min_block: int = 1_000
    max_block: int = 1_000_000
    fixed_block: Optional[int] = None
    low_water: float = 0.5
    demand_window_s: float = 5.0

    def __post_init__(self) -> None:
        if self.fixed_block is not None and self.fixed_block < 1:
            raise ValueError("fixed_block must be at least 1")
        if not 1 <= self.min_block <= self.max_block:
            raise ValueError("need 1 <= min_block <= max_block")
        if not (math.isfinite(self.buffer_seconds) and self.buffer_seconds > 0):
            raise ValueError("buffer_seconds must be a positive number")
        if not 0 < self.low_water <= 1:
            raise ValueError("low_water must be in (0, 1]")
        if not self.demand_window_s > 0:
            raise ValueError("demand_window_s must be above 0")


class Buffer:
    """See the module docs."""

    def __init__(self, policy: BufferPolicy) -> None:
        self.policy = policy
        self.blocks: deque[Block] = deque()
        self.buffered = 0
        self.highest: dict[tuple[int, int], int] = {}
        self.generation = 0
        self.refill_in_flight = False
        self.received = self.served = self.burned = self.given_back = self.refills = 0
        self.rate = 0.0
        self.recent = 0.0
        self._last_observe: Optional[int] = None
        self._served_at_observe = 0

    # Sizing.
    def target_block(self) -> int:
        p = self.policy
        if p.fixed_block is not None:
            return p.fixed_block
        want = math.ceil(max(self.rate, self.recent) * p.buffer_seconds)
        return max(p.min_block, min(p.max_block, want))

    def low_water_mark(self) -> int:
        return max(1, math.ceil(self.target_block() * self.policy.low_water))

    def wants_refill(self) -> bool:
        return not self.refill_in_flight and self.buffered < self.low_water_mark()

    def observe(self, now_ns: int, unclaimed: int = 0) -> None:
        """Folds the ids handed out since the last call into the demand average: those
        served, less the `unclaimed` ones the owner took out but has not handed out yet."""
        served = self.served - unclaimed
        if self._last_observe is None:
            self._last_observe, self._served_at_observe = now_ns, served
            return
        dt_ns = now_ns - self._last_observe
        if dt_ns < 1_000_000:
            return
        dt = dt_ns / 1e9
        rate = max(0, served - self._served_at_observe) / dt
        self.rate += (1 - math.exp(-dt / self.policy.demand_window_s)) * (rate - self.rate)
        if dt_ns >= _RECENT_MIN_NS:
            self.recent = rate
        self._last_observe, self._served_at_observe = now_ns, served

    def start_refill(self, now_ns: int, force: bool, unclaimed: int = 0) -> Optional[int]:
        """If a refill is wanted (or `force`d: a taker found nothing) and none is in flight,
        marks one in flight and returns how many ids to ask for."""
        self.observe(now_ns, unclaimed)
        if self.refill_in_flight or not (force or self.wants_refill()):
            return None
        self.refill_in_flight = True
        return self.target_block()

    def refill_failed(self) -> None:
        self.refill_in_flight = False

    # Blocks in and out.
    def push(self, block: Block) -> Optional[Block]:
        """Adds a block (ending a refill in flight); the part at or below ids already received
        of its class is burned. Returns the part kept."""
        self.refill_in_flight = False
        self.received += len(block)
        self.refills += 1
        key = (block.step, block.start % block.step)
        highest = self.highest.get(key)
        kept: Optional[Block] = block
        if highest is not None and block.start <= highest:
            below = (highest - block.start) // block.step + 1
            dropped, kept = block.split(min(below, len(block)))
            self.burned += len(dropped)
        if kept is None:
            return None
        self.highest[key] = kept.last()
        last = self.blocks[-1] if self.blocks else None
        if last is not None and last.end == kept.start and last.step == kept.step:
            self.blocks[-1] = Block(last.start, kept.end, kept.step)
        else:
            self.blocks.append(kept)
        self.buffered += len(kept)
        return kept

    def take(self, max_ids: int) -> Optional[Block]:
        """Up to `max_ids` ids from the front, as one block; None when empty."""
        if not self.blocks:
            return None
        got, rest = self.blocks[0].split(max_ids)
        if rest is None:
            self.blocks.popleft()
        else:
            self.blocks[0] = rest
        self.buffered -= len(got)
        self.served += len(got)
        self.generation += 1
        return got

    def put_back(self, blocks: list[Block], generation: Optional[int]) -> bool:
        """Undoes takes whose last left the buffer at `generation`: the blocks go back in front,
        in order, if nothing was taken since (`generation` is current); else they are burned.
        Either way they leave `served`. Returns whether they went back."""
        ids = sum(len(b) for b in blocks)
        self.served -= ids
        if generation != self.generation:
            self.burned += ids
            return False
        for block in reversed(blocks):
            first = self.blocks[0] if self.blocks else None
            if first is not None and block.end == first.start and block.step == first.step:
                self.blocks[0] = Block(block.start, first.end, block.step)
            else:
                self.blocks.appendleft(block)
        self.buffered += ids
        self.generation += 1
        return True

    def take_unused_tail(self) -> Optional[Block]:
        """Empties the buffer: the newest block is returned, every older one burned."""
        if not self.blocks:
            return None
        newest = self.blocks.pop()
        self.burned += self.buffered - len(newest)
        self.blocks.clear()
        self.buffered = 0
        self.generation += 1
        return newest
