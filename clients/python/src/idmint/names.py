"""The client's own checks of names and counts, the same rules as the node's."""

from __future__ import annotations

import re

from .errors import InvalidCount, InvalidNamespace

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


def check_name(name: str) -> str:
    """`name` if it is a valid namespace name (1-128 of [A-Za-z0-9_.:-], starting with a
    letter or digit), else `InvalidNamespace`."""
    if not isinstance(name, str) or not name.isascii() or not _NAME.fullmatch(name):
        raise InvalidNamespace(
            f"invalid namespace name {name!r}: 1 to 128 of A-Z a-z 0-9 _ . : -, "
            "starting with a letter or digit")
    return name


def check_count(count: int) -> int:
    """`count` if it is a whole number of at least 1, else `InvalidCount`."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidCount(f"count must be a whole number of at least 1, got {count!r}")
    return count
