"""The client's own checks of names and counts, the same rules as the node's."""

from __future__ import annotations

import re

from typing import Optional

from .errors import InvalidCount, InvalidNamespace, InvalidRequest

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


def check_route(shard: Optional[int], key: Optional[int]) -> bool:
    """Whether a request names a shard: `shard` or `key`, each a whole number from 0 to
    2^64 - 1, never both (a key names its shard), else `InvalidRequest`."""
    for name, value in (("shard", shard), ("key", key)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
            raise InvalidRequest(f"{name} must be a whole number from 0 to 2^64 - 1, got {value!r}")
    if shard is not None and key is not None:
        raise InvalidRequest("give shard or key, not both: a key names its shard")
    return shard is not None or key is not None
