"""Routing a row from its key, offline, with the answers of `idmint decode` and
`idmint shard-for` (the shared vectors of clients/conformance/decode.json check all three).

- `shard_of(id, layout)`: the shard an id names (its node field; Instagram's layout).
- `shard_for(key, shards)`: the logical shard of a key, `key % shards`.
- `residue_of(id, step)` and `member_of(id, step, offsets)`: an id of a step/offset sequence
  (or of a multi authority) names its issuer by `id % step`; members are numbered from 1 in
  configuration order, as `idmint admin reseed --member` numbers them.
- `CompositeKey`: `(shard, local)` written `shard-local` (`42-1007`). The text is canonical:
  decimal 64-bit parts, no sign, no leading zero (`0` itself allowed), no spaces; anything else
  raises `InvalidId` naming the part at fault.

Ids and keys are `int` (0 to 2^64 - 1) or decimal text (ASCII digits only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from .errors import InvalidId, InvalidRequest
from .layouts import Layout

_U64_LIMIT = 1 << 64


def parse_u64(value: Union[int, str], what: str = "id") -> int:
    """`value` as a 64-bit number: an `int` in range, or text of ASCII digits only."""
    if isinstance(value, bool):
        raise InvalidId(f"{value!r} is not a decimal 64-bit {what}")
    if isinstance(value, int):
        n = value
    elif value and value.isascii() and value.isdigit():
        n = int(value)
    else:
        raise InvalidId(f"{value!r} is not a decimal 64-bit {what}")
    if not 0 <= n < _U64_LIMIT:
        raise InvalidId(f"{value!r} is not a decimal 64-bit {what}")
    return n


def _positive(n: int, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < _U64_LIMIT:
        raise InvalidRequest(f"{what} must be a whole number from 1 to 2^64 - 1, not {n!r}")
    return n


def shard_for(key: Union[int, str], shards: int) -> int:
    """The logical shard of `key` among `shards`: `key % shards` (Instagram's
    `user_id % logical_shards`)."""
    return parse_u64(key, "key") % _positive(shards, "shards")


def shard_of(id: Union[int, str], layout: Union[str, Layout] = "instagram",
             epoch: Optional[int] = None) -> int:
    """The shard an id was made on: its node field (`shard` of an Instagram-layout id)."""
    resolved = Layout.preset(layout) if isinstance(layout, str) else layout
    if epoch is not None:
        resolved = resolved.with_epoch(epoch)
    n = parse_u64(id)
    if n >> resolved.total_bits:
        raise InvalidId(f"id {n} uses more than the layout's {resolved.total_bits} bits")
    return resolved.split(n)[1]


def residue_of(id: Union[int, str], step: int) -> int:
    """The residue class of `id` modulo `step`: the offset of the sequence that issued it."""
    return parse_u64(id) % _positive(step, "step")


def member_of(id: Union[int, str], step: int, offsets: Sequence[int]) -> Optional[int]:
    """The number (from 1, in the order given) of the member whose offset is `id`'s residue
    class modulo `step`; None when no offset is."""
    residue = residue_of(id, step)
    for number, offset in enumerate(offsets, start=1):
        if offset == residue:
            return number
    return None


def _part(text: str, digits: str, part: str) -> int:
    if not digits:
        raise InvalidId(f"{text!r} is not a composite key: the {part} is empty")
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidId(f"{text!r} is not a composite key: the {part} is not a decimal number")
    if len(digits) > 1 and digits[0] == "0":
        raise InvalidId(f"{text!r} is not a composite key: the {part} has a leading zero")
    n = int(digits)
    if n >= _U64_LIMIT:
        raise InvalidId(f"{text!r} is not a composite key: the {part} is above "
                        f"{_U64_LIMIT - 1}")
    return n


@dataclass(frozen=True, order=True)
class CompositeKey:
    """A row's key as the shard holding it and its id within that shard."""

    shard: int
    local: int

    def __post_init__(self) -> None:
        for name in ("shard", "local"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) \
                    or not 0 <= value < _U64_LIMIT:
                raise InvalidId(f"a composite key's {name} is a 64-bit number, not {value!r}")

    def __str__(self) -> str:
        return f"{self.shard}-{self.local}"

    @staticmethod
    def parse(text: str) -> "CompositeKey":
        """`shard-local` text, e.g. `42-1007`."""
        shard, sep, local = text.partition("-")
        if not sep:
            raise InvalidId(f"{text!r} is not a composite key: expected SHARD-LOCAL, e.g. 42-1007")
        return CompositeKey(_part(text, shard, "shard"), _part(text, local, "local id"))
