"""Client settings: TLS files, timeouts, the buffer policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from .buffer import BufferPolicy

PathLike = Union[str, Path]


def _read(path: Optional[PathLike], what: str) -> Optional[bytes]:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{what} {path}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what} {path}: no PEM data")
    return data


@dataclass(frozen=True)
class Tls:
    """TLS for `https://` urls: the CA to trust (only it; None: the public roots) and the
    certificate and key to present to nodes that require client certificates. The files are
    read here, and an unreadable one is a `ValueError` naming it."""

    ca_file: Optional[PathLike] = None
    cert_file: Optional[PathLike] = None
    key_file: Optional[PathLike] = None
    ca_pem: Optional[bytes] = field(init=False, default=None, repr=False)
    cert_pem: Optional[bytes] = field(init=False, default=None, repr=False)
    key_pem: Optional[bytes] = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        object.__setattr__(self, "ca_pem", _read(self.ca_file, "CA file"))
        object.__setattr__(self, "cert_pem", _read(self.cert_file, "certificate file"))
        object.__setattr__(self, "key_pem", _read(self.key_file, "key file"))


@dataclass(frozen=True)
class ClientConfig:
    """Timeouts and sizes (docs/client.md, "Settings").

    - `op_timeout`: one call to one node, seconds;
    - `refill_wait`: the longest a call waits on an empty buffer;
    - `refill_tick`: how often the refill looks at the level;
    - `validity`: time-ordered ids are handed out only this long after their request;
    - `max_time_batch`: most ids one `Next` of a time-ordered namespace asks for (at most the
      nodes' `server.max_count`), and `max_request` the most any one request asks for;
    - `buffer`: sequence blocks' sizing;
    - `shard_map_refresh`: seconds a shard-owned namespace's shard map is used before the next
      routed request refreshes it (in the background; at once after its chosen node failed).
    """

    op_timeout: float = 5.0
    refill_wait: float = 2.0
    refill_tick: float = 0.1
    validity: float = 1.0
    max_time_batch: int = 1_000
    max_request: int = 1_000
    buffer: BufferPolicy = field(default_factory=BufferPolicy)
    shard_map_refresh: float = 10.0

    def __post_init__(self) -> None:
        for name in ("op_timeout", "refill_wait", "refill_tick", "validity"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be above 0")
        if not self.shard_map_refresh >= 0:
            raise ValueError("shard_map_refresh must be at least 0")
        if not 1 <= self.max_time_batch <= self.max_request:
            raise ValueError("need 1 <= max_time_batch <= max_request")
