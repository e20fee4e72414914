"""Offline decoding: what an id says about itself, with the answers of `idmint decode`.

`decode(id, layout)` takes a preset name (`twitter`, `instagram`, `sonyflake`, `discord`,
`js53`), `uuid7`, `ulid` or a `Layout`; the result's `as_dict()` is the JSON object
`idmint decode --json` prints. An id that is not one of the layout raises `InvalidId`.
"""

from __future__ import annotations

import datetime as _dt
import re
import uuid
from dataclasses import dataclass
from typing import Optional, Union

from .errors import InvalidId
from .layouts import Layout
from .ulid import parse_ulid

#: The last Unix millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z).
RFC3339_MAX_UNIX_MS = 253_402_300_799_999
_DECIMAL = re.compile(r"\+?[0-9]+")
_HEX = set("0123456789abcdefABCDEF")


def rfc3339_millis(unix_ms: int) -> Optional[str]:
    """`unix_ms` as RFC 3339 UTC with milliseconds; None after the year 9999."""
    if unix_ms > RFC3339_MAX_UNIX_MS:
        return None
    t = _dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=unix_ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Decoded:
    """A decoded id. `fields` are the layout's node field(s) and sequence, in the CLI's order
    (`worker`, `shard`, `machine`, `process`, `node`; then `sequence`); empty for UUIDv7/ULID."""

    kind: str
    id: str
    timestamp: Optional[str]
    unix_ms: int
    layout: Optional[str] = None
    fields: tuple[tuple[str, int], ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The JSON object of `idmint decode --json`."""
        out: dict[str, object] = {"kind": self.kind}
        if self.layout is not None:
            out["layout"] = self.layout
        out.update(id=self.id, timestamp=self.timestamp, unix_ms=self.unix_ms)
        out.update(self.fields)
        return out


def _snowflake(text: str, layout: Layout) -> Decoded:
    if not _DECIMAL.fullmatch(text) or int(text) >= 1 << 64:
        raise InvalidId(f"{text!r} is not a decimal 64-bit id")
    n = int(text)
    if n >> layout.total_bits:
        raise InvalidId(f"id {n} uses more than the layout's {layout.total_bits} bits")
    timestamp, node, sequence = layout.split(n)
    unix_ms = layout.unix_ms(timestamp)
    if layout.name == "discord":
        fields: tuple[tuple[str, int], ...] = (("worker", node >> 5), ("process", node & 0x1F))
    else:
        label = {"instagram": "shard", "sonyflake": "machine", "twitter": "worker",
                 "snowflake": "worker", "js53": "worker"}.get(layout.name, "node")
        fields = ((label, node),)
    stamp = rfc3339_millis(unix_ms) or f"{unix_ms} ms after 1970 (past year 9999)"
    fields += (("sequence", sequence),)
    return Decoded("snowflake", str(n), stamp, unix_ms, layout.name, fields)


def parse_uuid7(text: str) -> uuid.UUID:
    """A UUIDv7 from its hyphenated text (any case) or 32 hex digits."""
    if len(text) == 36:
        if any(text[i] != "-" for i in (8, 13, 18, 23)):
            raise InvalidId(f"{text!r} is not a UUIDv7: hyphens belong at 8, 13, 18, 23")
        digits = text[:8] + text[9:13] + text[14:18] + text[19:23] + text[24:]
    elif len(text) == 32:
        digits = text
    else:
        raise InvalidId(f"{text!r} is not a UUIDv7: 36 characters (or 32 without hyphens)")
    if not set(digits) <= _HEX:
        raise InvalidId(f"{text!r} is not a UUIDv7: not hexadecimal")
    u = uuid.UUID(hex=digits)
    if u.int >> 76 & 0xF != 7:
        raise InvalidId(f"{text!r} is not a UUIDv7: version {u.int >> 76 & 0xF}")
    if u.int >> 62 & 0b11 != 0b10:
        raise InvalidId(f"{text!r} is not a UUIDv7: not the RFC 9562 variant")
    return u


def decode(id: Union[str, int], layout: Union[str, Layout], epoch: Optional[int] = None) -> Decoded:
    """Decodes `id` offline as `idmint decode ID --layout LAYOUT [--epoch MS]` does."""
    text = str(id).strip()
    if isinstance(layout, Layout):
        return _snowflake(text, layout if epoch is None else layout.with_epoch(epoch))
    if layout in ("uuid7", "ulid"):
        if epoch is not None:
            raise InvalidId(f"an epoch applies to snowflake layouts, not {layout}")
        if layout == "uuid7":
            u = parse_uuid7(text)
            unix_ms = u.int >> 80
            return Decoded("uuid7", str(u), rfc3339_millis(unix_ms), unix_ms)
        value, canonical = parse_ulid(text)
        unix_ms = value >> 80
        return Decoded("ulid", canonical, rfc3339_millis(unix_ms), unix_ms)
    preset = Layout.preset(layout)
    return _snowflake(text, preset if epoch is None else preset.with_epoch(epoch))
