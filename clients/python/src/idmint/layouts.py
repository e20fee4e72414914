"""Snowflake layouts: how a 64-bit id splits into timestamp, node and sequence.

The presets are idmint's (docs/configuration.md, "Layouts"); `Layout.custom` builds one from
field widths, a time unit and an epoch, validated by the same rules as the node's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidRequest

_UNITS_NS = {"us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_MAX_U64 = (1 << 64) - 1


def parse_unit(text: str) -> int:
    """A time unit such as `1us`, `1ms`, `10ms`, `1s`, in nanoseconds."""
    text = text.strip()
    digits = len(text) - len(text.lstrip("0123456789"))
    number, suffix = text[:digits], text[digits:].strip()
    if not number or suffix not in _UNITS_NS:
        raise InvalidRequest(f"{text!r}: unknown time unit; use us, ms or s (e.g. 1ms, 10ms, 1s)")
    return int(number) * _UNITS_NS[suffix]


@dataclass(frozen=True)
class Layout:
    """A validated snowflake layout. `name` is the preset's, or `custom`."""

    name: str
    timestamp_bits: int
    node_bits: int
    sequence_bits: int
    unit_nanos: int
    epoch_unix_ms: int
    sequence_before_node: bool = False
    max_bits: int = 63

    def __post_init__(self) -> None:
        total = self.timestamp_bits + self.node_bits + self.sequence_bits
        if min(self.timestamp_bits, self.node_bits, self.sequence_bits) < 0:
            raise InvalidRequest("field widths cannot be negative")
        if self.max_bits > 63:
            raise InvalidRequest(f"max_bits is {self.max_bits}; at most 63")
        if self.timestamp_bits == 0:
            raise InvalidRequest("the timestamp needs at least 1 bit")
        if total > self.max_bits:
            raise InvalidRequest(f"{total} bits, more than the {self.max_bits} allowed")
        if not 1_000 <= self.unit_nanos <= 86_400 * 1_000_000_000:
            raise InvalidRequest("the time unit must be from 1 microsecond to 1 day")
        if not 0 <= self.epoch_unix_ms * 1_000_000 <= _MAX_U64:
            raise InvalidRequest(f"epoch {self.epoch_unix_ms} ms is out of range")

    @property
    def total_bits(self) -> int:
        return self.timestamp_bits + self.node_bits + self.sequence_bits

    @staticmethod
    def preset(name: str) -> "Layout":
        """`twitter` (or `snowflake`), `instagram`, `sonyflake`, `discord` or `js53`."""
        spec = _PRESETS.get(name)
        if spec is None:
            raise InvalidRequest(f"unknown layout {name!r}; known: {', '.join(PRESETS)}")
        ts, node, seq, unit, epoch, seq_first, max_bits = spec
        return Layout(name, ts, node, seq, unit, epoch, seq_first, max_bits)

    @staticmethod
    def custom(timestamp_bits: int, node_bits: int, sequence_bits: int, unit: str = "1ms",
               epoch_unix_ms: int = 0) -> "Layout":
        """A custom layout, node before sequence (as Twitter), as `idmint decode --bits`."""
        return Layout("custom", timestamp_bits, node_bits, sequence_bits, parse_unit(unit),
                      epoch_unix_ms)

    def with_epoch(self, epoch_unix_ms: int) -> "Layout":
        return Layout(self.name, self.timestamp_bits, self.node_bits, self.sequence_bits,
                      self.unit_nanos, epoch_unix_ms, self.sequence_before_node, self.max_bits)

    def split(self, id_: int) -> tuple[int, int, int]:
        """(timestamp, node, sequence) of `id_`, which must fit the layout's bits."""
        if self.sequence_before_node:
            node_shift, sequence_shift = 0, self.node_bits
        else:
            node_shift, sequence_shift = self.sequence_bits, 0
        timestamp = id_ >> (self.node_bits + self.sequence_bits)
        node = (id_ >> node_shift) & ((1 << self.node_bits) - 1)
        sequence = (id_ >> sequence_shift) & ((1 << self.sequence_bits) - 1)
        return timestamp, node, sequence

    def unix_ms(self, timestamp: int) -> int:
        """The Unix millisecond of a timestamp field (nanoseconds saturate at 2^64 - 1)."""
        nanos = min(timestamp * self.unit_nanos, _MAX_U64)
        nanos = min(nanos + self.epoch_unix_ms * 1_000_000, _MAX_U64)
        return nanos // 1_000_000


# name: (timestamp bits, node bits, sequence bits, unit ns, epoch ms, sequence first, max bits)
_PRESETS: dict[str, tuple[int, int, int, int, int, bool, int]] = {
    "twitter": (41, 10, 12, 1_000_000, 1_288_834_974_657, False, 63),
    "snowflake": (41, 10, 12, 1_000_000, 1_288_834_974_657, False, 63),
    "instagram": (40, 13, 10, 1_000_000, 1_314_220_021_721, False, 63),
    "sonyflake": (39, 16, 8, 10_000_000, 1_409_529_600_000, True, 63),
    "discord": (41, 10, 12, 1_000_000, 1_420_070_400_000, False, 63),
    "js53": (41, 5, 7, 1_000_000, 1_735_689_600_000, False, 53),
}

PRESETS = ("twitter", "instagram", "sonyflake", "discord", "js53")
