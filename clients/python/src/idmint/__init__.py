"""idmint: the Python client of the idmint id service.

`Client` (sync, thread-safe) and `AsyncClient` (asyncio) keep ids in the process: a buffer of
blocks leased from nodes for sequence namespaces, batches for snowflake, UUIDv7 and ULID ones;
unused ids go back on `close()` and at interpreter exit. `decode` reads ids offline; `keys`
routes a row from its key (`shard_of`, `shard_for`, `residue_of`, `member_of`,
`CompositeKey`). `client.local_snowflake(name)` makes snowflake ids in the process under a
worker id leased from the nodes. `client.sequence(name)`, `.snowflake`, `.uuid7`, `.ulid` are handles typed by
the kind (`Ids[int]`, `Ids[uuid.UUID]`, `Ids[str]`). `idmint.metrics` (the `prometheus` extra)
exposes the clients' counters to Prometheus. Every error is an `IdmintError` subclass named after its code.
"""

import atexit

from .aio import AsyncClient, AsyncLocalSnowflake, AsyncNamespace, close_all_at_exit
from .buffer import BufferPolicy
from .client import Client, Namespace, close_all
from .config import ClientConfig, Tls
from .decode import Decoded, decode
from .errors import *  # noqa: F401,F403
from .errors import IdmintError, error_class, error_for
from .keys import CompositeKey, member_of, residue_of, shard_for, shard_of
from .layouts import Layout
from .local import LocalIds
from .local_snowflake import LocalSnowflake, LocalSnowflakeConfig
from .sequence import Stats
from .typed import AsyncIds, Ids
from .types import Id, NamespaceInfo

atexit.register(close_all_at_exit)
atexit.register(close_all)

__all__ = [
    "AsyncClient", "AsyncIds", "AsyncLocalSnowflake", "AsyncNamespace", "BufferPolicy", "Client", "ClientConfig", "CompositeKey",
    "Decoded", "Id", "Ids", "IdmintError", "Layout", "LocalIds", "LocalSnowflake",
    "LocalSnowflakeConfig", "Namespace", "NamespaceInfo", "Stats",
    "Tls", "decode", "error_class", "error_for", "member_of", "residue_of", "shard_for",
    "shard_of",
]
__version__ = "0.1.0"
