"""ULID text: 26 characters of Crockford base32 for 128 bits, most significant first."""

from __future__ import annotations

from .errors import InvalidId

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALUE = {c: i for i, c in enumerate(ALPHABET)}


def ulid_text(value: int) -> str:
    """The canonical (uppercase) text of a 128-bit value."""
    return "".join(ALPHABET[(value >> (5 * (25 - i))) & 0x1F] for i in range(26))


def ulid_from_bytes(data: bytes) -> str:
    """The text of 16 big-endian bytes."""
    if len(data) != 16:
        raise InvalidId(f"a ULID is 16 bytes, not {len(data)}")
    return ulid_text(int.from_bytes(data, "big"))


def parse_ulid(text: str) -> tuple[int, str]:
    """(value, canonical text) of ULID text in any case."""
    if len(text.encode()) != 26:
        raise InvalidId(f"{text!r} is not a ULID: 26 characters")
    value = 0
    for position, c in enumerate(text):
        digit = _VALUE.get(c.upper()) if c.isascii() else None
        if digit is None:
            raise InvalidId(f"{text!r} is not a ULID: {c!r} at {position} is not Crockford base32")
        if position == 0 and digit > 7:
            raise InvalidId(f"{text!r} is not a ULID: above 128 bits")
        value = value << 5 | digit
    return value, ulid_text(value)
