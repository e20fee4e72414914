"""The rules of a lease-driven snowflake generator (`idmint.snowflake_rules`) on a manual clock:
nothing before a renewal, nothing at or past the recorded floor or the lease's end less the
margin, nothing below the floor or earlier ids when the wall clock steps back, the layout
lock's text as the Rust core writes it."""

from __future__ import annotations

import pytest

from idmint import Layout
from idmint.snowflake_rules import BeyondLimit, Generator, lock_text

START_MS = 1_800_000_000_000
MS = 1_000_000
TTL, MARGIN = 10_000 * MS, 2_000 * MS
TWITTER = Layout.preset("twitter")


class ManualClock:
    def __init__(self, wall_ms: int) -> None:
        self.wall = wall_ms * MS
        self.mono = 0

    def wall_ns(self) -> int:
        return self.wall

    def monotonic_ns(self) -> int:
        return self.mono

    def advance_ms(self, ms: int) -> None:
        self.wall += ms * MS
        self.mono += ms * MS

    def step_wall_ms(self, ms: int) -> None:
        self.wall += ms * MS


def ts_ms(id_: int) -> int:
    return TWITTER.unix_ms(TWITTER.split(id_)[0])


def test_nothing_is_issued_before_the_first_renewal() -> None:
    g = Generator(TWITTER, 3, 0, ManualClock(START_MS))
    with pytest.raises(BeyondLimit):
        g.next()


def test_issuing_stops_a_margin_before_the_lease_could_expire() -> None:
    clock = ManualClock(START_MS)
    g = Generator(TWITTER, 3, 0, clock)
    g.renewed(g.now_ns(), START_MS + 60_000, TTL, MARGIN)
    first = g.next()
    assert TWITTER.split(first)[1] == 3
    clock.advance_ms(7_999)
    last = g.next()
    assert last > first and ts_ms(last) < START_MS + 8_000
    clock.advance_ms(1)
    with pytest.raises(BeyondLimit):
        g.next()
    g.renewed(g.now_ns(), START_MS + 60_000, TTL, MARGIN)
    assert g.next() > last


def test_issuing_stops_below_the_recorded_floor() -> None:
    clock = ManualClock(START_MS)
    g = Generator(TWITTER, 3, 0, clock)
    g.renewed(g.now_ns(), START_MS + 3_000, TTL, MARGIN)
    clock.advance_ms(2_999)
    assert ts_ms(g.next()) < START_MS + 3_000
    clock.advance_ms(1)
    with pytest.raises(BeyondLimit):
        g.next()


def test_a_clock_stepped_back_never_issues_below_the_floor_or_earlier_ids() -> None:
    clock = ManualClock(START_MS)
    g = Generator(TWITTER, 3, START_MS - 100, clock)
    g.renewed(g.now_ns(), START_MS + 5_000, TTL, MARGIN)
    before = g.next()
    clock.step_wall_ms(-30_000)
    after = g.next()
    assert after > before
    own = g.issued_below_ms()
    assert own > ts_ms(after)
    # A new generator (a lease taken anew, another worker, floor 0) with the clock 30 s back.
    nxt = Generator(TWITTER, 4, 0, clock, own)
    clock.advance_ms(40_000)
    nxt.renewed(nxt.now_ns(), 2 ** 62 // MS, TTL, MARGIN)
    assert ts_ms(nxt.next()) >= own


def test_ids_increase_through_a_used_up_unit() -> None:
    clock = ManualClock(START_MS)
    g = Generator(Layout.preset("js53"), 1, 0, clock)   # 128 ids a millisecond
    g.renewed(g.now_ns(), START_MS + 5_000, TTL, MARGIN)
    ids = [g.next() for _ in range(128)]
    assert ids == sorted(set(ids))
    clock.advance_ms(1)
    assert g.next() > ids[-1]


def test_stop_is_for_good() -> None:
    g = Generator(TWITTER, 3, 0, ManualClock(START_MS))
    g.renewed(g.now_ns(), START_MS + 5_000, TTL, MARGIN)
    g.next()
    g.stop()
    with pytest.raises(BeyondLimit):
        g.next()


def test_the_lock_text_is_the_cores() -> None:
    assert lock_text(TWITTER) == (
        "timestamp_bits=41 node_bits=10 sequence_bits=12 time_unit_ns=1000000 "
        "epoch_unix_ms=1288834974657 order=node_then_sequence max_bits=63")
    assert "order=sequence_then_node" in lock_text(Layout.preset("sonyflake"))
    assert "max_bits=53" in lock_text(Layout.preset("js53"))
