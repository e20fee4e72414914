"""The block buffer and the sequence core without a node: blocks are granted by hand."""

from __future__ import annotations

import random
import threading

import pytest

import idmint
from idmint.buffer import Block, Buffer, BufferPolicy
from idmint.sequence import SequenceCore, check_block
from idmint.types import Leased, SequenceSpec

SPEC = SequenceSpec(width=64, step=1, offset=0, residues=(0,))


def accounted(b: Buffer) -> bool:
    return b.received == b.served + b.buffered + b.burned + b.given_back


def test_blocks_below_the_ids_held_are_cut_and_the_rest_burned() -> None:
    b = Buffer(BufferPolicy(fixed_block=100))
    assert b.push(Block(100, 200, 1)) == Block(100, 200, 1)
    assert b.push(Block(150, 250, 1)) == Block(200, 250, 1)  # another node's, reaching below
    assert b.push(Block(10, 20, 1)) is None  # entirely below: burned whole
    got = []
    while (block := b.take(7)) is not None:
        got += list(range(*block))
    assert got == list(range(100, 250))
    assert (b.served, b.burned, b.buffered) == (150, 60, 0) and accounted(b)


def test_put_back_only_while_nothing_was_taken_since() -> None:
    b = Buffer(BufferPolicy(fixed_block=100))
    b.push(Block(1, 101, 1))
    first = b.take(10)
    assert first is not None and b.put_back([first], b.generation)
    assert b.take(1) == Block(1, 2, 1)  # the put-back ids come out first
    second = b.take(10)
    generation = b.generation
    b.take(1)  # someone else took since
    assert second is not None and not b.put_back([second], generation)
    assert b.burned == 10 and accounted(b)


def test_the_unused_tail_is_the_newest_block_older_ones_burn() -> None:
    b = Buffer(BufferPolicy(fixed_block=100))
    b.push(Block(1, 101, 1))
    b.push(Block(501, 601, 1))
    b.take(30)
    assert b.take_unused_tail() == Block(501, 601, 1)
    assert b.burned == 70 and b.buffered == 0


def test_adaptive_blocks_follow_demand_within_bounds() -> None:
    b = Buffer(BufferPolicy(buffer_seconds=10, min_block=1000, max_block=50_000))
    assert b.target_block() == 1000
    b.push(Block(1, 1_000_001, 1))
    b.observe(0)
    b.take(20_000)
    b.observe(1_000_000_000)  # 20,000 ids in a second
    assert b.target_block() == 50_000
    assert b.low_water_mark() == 25_000


def test_only_blocks_of_the_namespace_are_used() -> None:
    spec = SequenceSpec(width=32, step=4, offset=1, residues=(1, 3))
    assert check_block(spec, Leased(1, 41, 4, 7))
    assert check_block(spec, Leased(3, 43, 4, 7))
    for bad in (Leased(2, 42, 4, 7), Leased(1, 41, 2, 7), Leased(5, 5, 4, 7),
                Leased((1 << 31) - 3, 1 << 32, 4, 7)):
        with pytest.raises(idmint.NodeError):
            check_block(spec, bad)


def core_with(*blocks: tuple[int, int, int]) -> SequenceCore:
    core = SequenceCore("n", SPEC, BufferPolicy(fixed_block=1000))
    for start, end, lease in blocks:
        core.refill_done(Leased(start, end, 1, lease), node=lease)
    return core


def test_close_gives_back_the_newest_blocks_tail_only() -> None:
    core = core_with((1, 1001, 11), (1001, 2001, 12))  # contiguous: merged in the buffer
    for _ in range(10):
        assert core.try_next() is not None
    tail = core.begin_close()
    assert tail is not None
    assert (tail.block, tail.lease, tail.node) == (Block(1001, 2001, 1), 12, 12)
    core.give_back_done(tail, True)
    s = core.stats()
    assert (s.served, s.burned, s.given_back, s.buffered) == (10, 990, 1000, 0)
    with pytest.raises(idmint.Closed):
        core.try_next()
    assert core.begin_close() is None


def test_a_lease_joined_to_the_previous_one_gives_back_every_unused_id() -> None:
    core = SequenceCore("n", SPEC, BufferPolicy(fixed_block=1000))
    core.refill_done(Leased(1, 1001, 1, 11), node=0)
    assert core.extends() == 11
    core.refill_done(Leased(1001, 2001, 1, 12, lease_start=1), node=0)  # the node joined them
    assert [core.try_next() for _ in range(3)] == [1, 2, 3]
    tail = core.begin_close()
    assert tail is not None
    assert (tail.block, tail.lease, tail.node) == (Block(4, 2001, 1), 12, 0)
    core.give_back_done(tail, True)
    s = core.stats()
    assert (s.served, s.burned, s.given_back, s.buffered) == (3, 0, 1997, 0)


def test_a_lease_from_another_node_joins_nothing() -> None:
    core = SequenceCore("n", SPEC, BufferPolicy(fixed_block=1000))
    core.refill_done(Leased(1, 1001, 1, 11), node=0)
    core.refill_done(Leased(1001, 2001, 1, 12, lease_start=1), node=1)
    core.try_next()
    tail = core.begin_close()
    assert tail is not None and tail.block == Block(1001, 2001, 1)
    assert core.stats().burned == 999


def test_ids_taken_into_the_window_are_not_demand() -> None:
    core = SequenceCore("n", SPEC, BufferPolicy())
    core.refill_done(Leased(1, 1001, 1, 11), node=0)
    assert core.plan_refill(0) is None
    assert [core.try_next() for _ in range(3)] == [1, 2, 3]  # a window of 125 ids is out
    assert core.plan_refill(100_000_000) is None  # 3 ids in 0.1 s: no refill due
    assert core.stats().next_fetch == 1000


def test_a_batch_retires_the_window_so_ids_stay_in_order() -> None:
    core = core_with((1, 1001, 1))
    assert core.try_next() == 1  # carves a window of 125
    blocks, _ = core.take_batch(5)
    assert [i for b in blocks for i in range(*b)] == [2, 3, 4, 5, 6]
    assert core.try_next() == 7


def test_threads_share_the_window_without_repeating_an_id() -> None:
    core = core_with(*[(1 + i * 1000, 1001 + i * 1000, i + 1) for i in range(40)])
    seen: list[list[int]] = [[] for _ in range(8)]

    def work(i: int) -> None:
        rng = random.Random(i)
        while True:
            if rng.random() < 0.05:
                blocks, _ = core.take_batch(rng.randint(1, 300))
                got = [x for b in blocks for x in range(*b)]
                if not got:
                    return
                seen[i] += got
            else:
                one = core.try_next()
                if one is None:
                    return
                seen[i].append(one)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [x for ids in seen for x in ids]
    assert len(everything) == len(set(everything)) == 40_000
    for ids in seen:
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    s = core.stats()
    assert (s.served, s.buffered, s.burned) == (40_000, 0, 0)
