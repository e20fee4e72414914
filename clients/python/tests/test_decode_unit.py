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
