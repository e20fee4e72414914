"""`LocalIds` without a node: chunks, tails back to the buffer, errors once, closed forever."""

from __future__ import annotations

import pytest

import idmint
from idmint.buffer import BufferPolicy
from idmint.local import LocalIds
from idmint.sequence import SequenceCore
from idmint.types import Leased, SequenceSpec


def make(fail: list[idmint.IdmintError]) -> tuple[SequenceCore, LocalIds]:
    core = SequenceCore("n", SequenceSpec(64, 1, 0, (0,)), BufferPolicy(fixed_block=800))
    core.refill_done(Leased(1, 801, 1, 5), 0)

    def wait_chunk() -> tuple[idmint.buffer.Block, int]:
        got = core.take_chunk()
        if got is None:
            raise fail.pop() if fail else idmint.Unavailable("empty")
        return got

    return core, LocalIds.create(core, wait_chunk)


def test_ids_come_in_order_and_the_unused_tail_goes_back() -> None:
    core, ids = make([])
    assert [next(ids) for _ in range(150)] == list(range(1, 151))  # chunks of 100
    ids.close()
    assert core.try_next() == 151
    with pytest.raises(idmint.Closed):
        next(ids)
    with pytest.raises(idmint.Closed):
        next(ids)


def test_an_error_surfaces_once_and_the_handle_goes_on() -> None:
    core, ids = make([idmint.NamespaceExhausted("no more")])
    assert len([next(ids) for _ in range(800)]) == 800
    with pytest.raises(idmint.NamespaceExhausted):
        next(ids)
    core.refill_done(Leased(1001, 1101, 1, 6), 0)
    assert next(ids) == 1001
