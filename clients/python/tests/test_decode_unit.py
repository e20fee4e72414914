"""Offline decoding beyond decode.json: layouts refused as the node refuses them, ULID text."""

from __future__ import annotations

import pytest

import idmint
from idmint.ulid import parse_ulid, ulid_text


def test_layouts_are_validated() -> None:
    for bad in (lambda: idmint.Layout.custom(0, 10, 12),
                lambda: idmint.Layout.custom(41, 10, 13),
                lambda: idmint.Layout.custom(41, 10, 12, unit="1ns"),
                lambda: idmint.Layout.custom(41, 10, 12, unit="2d"),
                lambda: idmint.Layout.preset("nope")):
        with pytest.raises(idmint.InvalidRequest):
            bad()


def test_ulid_text_round_trips() -> None:
    for value in (0, 1, (1 << 128) - 1, 0x0123456789ABCDEF0123456789ABCDEF):
        text = ulid_text(value)
        assert parse_ulid(text) == (value, text) == parse_ulid(text.lower())


def test_epoch_applies_to_snowflakes_only() -> None:
    with pytest.raises(idmint.InvalidId):
        idmint.decode("01ARZ3NDEKTSV4RRFFQ69G5FAV", "ulid", epoch=5)
    assert idmint.decode("4194304", "twitter", epoch=0).unix_ms == 1


def test_routing_helpers() -> None:
    # Instagram's example: shard 1341 of 2000 logical shards, user 31341.
    id_ = (1_387_263_000 << 23) | (1341 << 10) | (5001 % 1024)
    assert idmint.shard_of(id_) == 1341
    assert idmint.shard_of(str(id_), "instagram", epoch=0) == 1341
    assert idmint.shard_for(31_341, 2000) == 1341
    assert idmint.residue_of(13, 4) == 1
    assert idmint.member_of(13, 4, [3, 1, 2]) == 2
    assert idmint.member_of(16, 4, [3, 1, 2]) is None
    with pytest.raises(idmint.InvalidRequest):
        idmint.residue_of(13, 0)
    with pytest.raises(idmint.InvalidId):
        idmint.shard_of(1 << 63)
    with pytest.raises(idmint.InvalidId):
        idmint.shard_for(-1, 2)


def test_composite_keys() -> None:
    k = idmint.CompositeKey(42, 1007)
    assert str(k) == "42-1007" and idmint.CompositeKey.parse("42-1007") == k
    assert idmint.CompositeKey.parse("0-0") < k
    for text, why in [("042-1", "shard has a leading zero"), ("4-", "local id is empty"),
                      ("4", "SHARD-LOCAL"), ("4-٣", "not a decimal number")]:
        with pytest.raises(idmint.InvalidId, match=why):
            idmint.CompositeKey.parse(text)
    with pytest.raises(idmint.InvalidId):
        idmint.CompositeKey(-1, 0)
