"""`LocalIds`: one owner's ids of a sequence namespace, at the speed of a bare iterator.

A `LocalIds` is an `itertools.chain` over chunks (a window's length of ids taken from the
namespace's buffer at a time, as `range` iterators), so `next(ids)` runs in C with no lock and
no Python frame while the chunk lasts; a chunk's end pulls the next from a generator that takes
it from the buffer (waiting for a refill when empty). Errors surface from `next()` as the typed
error once (`Closed` every time once the handle or client is closed). Ids increase per handle,
not across handles. One thread (or task) owns a handle. `close()` (or dropping the handle)
hands the current chunk's unused tail back to the buffer, or burns it if other ids were taken
from the buffer since.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterator, Optional

from .buffer import Block
from .errors import Closed, IdmintError
from .sequence import SequenceCore


class _Raise:
    """An iterator that raises `error` at its first `next()` (every `next()` if `forever`)."""

    def __init__(self, error: IdmintError, forever: bool = False) -> None:
        self.error = error
        self.forever = forever
        self.raised = False

    def __iter__(self) -> "_Raise":
        return self

    def __next__(self) -> int:
        if self.raised and not self.forever:
            raise StopIteration
        self.raised = True
        raise self.error


class _State:
    def __init__(self, core: SequenceCore) -> None:
        self.core = core
        self.closed = False
        self.current: Optional[tuple[Block, int, Iterator[int]]] = None


def _chunks(state: _State, wait_chunk: Callable[[], tuple[Block, int]]) -> Iterator[Iterator[int]]:
    while True:
        if state.closed:
            yield _Raise(Closed(f"the handle is closed (namespace {state.core.name})"), True)
            continue
        try:
            block, generation = wait_chunk()
        except Closed as e:
            yield _Raise(e, True)
            continue
        except IdmintError as e:
            yield _Raise(e)
            continue
        it = iter(range(block.start, block.end, block.step))
        state.current = (block, generation, it)
        yield it


class LocalIds(itertools.chain):  # type: ignore[type-arg]
    """See the module docs. Iterate it, or call `next(ids)`."""

    _state: _State

    @classmethod
    def create(cls, core: SequenceCore, wait_chunk: Callable[[], tuple[Block, int]]) -> "LocalIds":
        state = _State(core)
        ids: LocalIds = cls.from_iterable(_chunks(state, wait_chunk))  # type: ignore[assignment]
        ids._state = state
        return ids

    def close(self) -> None:
        """Hands the current chunk's unused tail back; later `next()` raises `Closed`."""
        state = self._state
        if state.closed:
            return
        state.closed = True
        if state.current is None:
            return
        block, generation, it = state.current
        state.current = None
        left = it.__length_hint__()  # type: ignore[attr-defined]
        it.__setstate__(len(block))  # type: ignore[attr-defined]
        if left:
            start = block.start + (len(block) - left) * block.step
            state.core.return_chunk(Block(start, block.end, block.step), generation)

    def __enter__(self) -> "LocalIds":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to give back to
            pass
