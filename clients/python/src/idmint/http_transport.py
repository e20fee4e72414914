"""One node over its HTTP/JSON API (docs/api.md): the fallback transport, for networks
where gRPC does not pass. Blocks are leased as over gRPC (`POST /v1/blocks`, the unused tail
back with `POST /v1/blocks/{namespace}/give-back`). Sync, one kept-alive connection per
thread; the asyncio variant runs the same calls in worker threads."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from typing import Any, Optional

from .config import Tls
from .errors import IdmintError, NodeError, Unavailable, error_for
from .types import Id, Leased, NamespaceInfo, SequenceSpec

#: A kept-alive connection idle this long is replaced (nodes close idle ones after
#: `header_read_timeout_ms`, 10 s by default).
_MAX_IDLE_S = 4.0


def _id_of(text: str, kind: str) -> Id:
    if kind == "uuid7":
        return uuid.UUID(text)
    if kind == "ulid":
        return text
    return int(text)


def ids_path(namespace: str, count: int, shard: Optional[int] = None,
             key: Optional[int] = None) -> str:
    """The path and query of `GET /v1/ids`: `count`, and `shard` or `key` when given."""
    query = f"count={count}"
    if shard is not None:
        query += f"&shard={shard}"
    if key is not None:
        query += f"&key={key}"
    return f"/v1/ids/{namespace}?{query}"


def http_error(label: str, status: int, body: bytes) -> IdmintError:
    """An error answer as a typed error: the body's code, else by status."""
    try:
        detail = json.loads(body)["error"]
        return error_for(str(detail["code"]), str(detail["message"]))
    except (ValueError, KeyError, TypeError):
        if status in (502, 503, 504):
            return Unavailable(f"{label} answered {status}")
        return NodeError(f"{label} answered {status} without an idmint error")


class HttpTransport:
    """One node's HTTP API, sync. Thread-safe."""

    def __init__(self, url: str, label: str, token: Optional[str] = None,
                 tls: Optional[Tls] = None, timeout: float = 5.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: an HTTP url is http://HOST:PORT or https://HOST:PORT")
        self.label = label
        self.host = parts.hostname
        self.port = parts.port
        self.timeout = timeout
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.context: Optional[ssl.SSLContext] = None
        if parts.scheme == "https":
            cadata = tls.ca_pem.decode() if tls is not None and tls.ca_pem else None
            self.context = ssl.create_default_context(cadata=cadata)
            if tls is not None and tls.cert_file is not None and tls.key_file is not None:
                self.context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn: Optional[http.client.HTTPConnection] = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - self._local.used > _MAX_IDLE_S:
            conn.close()
            conn = None
        if conn is None:
            if self.context is not None:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                   context=self.context)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _request(self, method: str, path: str) -> Any:
        conn = self._connection()
        try:
            conn.request(method, path, headers=self.headers)
            answer = conn.getresponse()
            body = answer.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            self._local.conn = None
            raise Unavailable(f"{self.label} did not answer: {e!r}") from None
        self._local.used = time.monotonic()
        if answer.status >= 400:
            raise http_error(self.label, answer.status, body)
        try:
            return json.loads(body)
        except ValueError:
            raise NodeError(f"{self.label} answered {answer.status} without JSON") from None

    def next(self, namespace: str, count: int, kind: str, shard: Optional[int] = None,
             key: Optional[int] = None) -> list[Id]:
        answer = self._request("GET", ids_path(namespace, count, shard, key))
        return [_id_of(text, kind) for text in answer["ids"]]

    def block(self, namespace: str, count: int, min_start: Optional[int] = None,
              extends: Optional[int] = None) -> Leased:
        # min_start is gRPC's: over HTTP a block below the ids held is cut by the client.
        query = f"count={count}" + (f"&extends={extends}" if extends else "")
        b = self._request("POST", f"/v1/blocks/{namespace}?{query}")
        return Leased(int(b["start"]), int(b["end"]), int(b["step"]), int(b.get("lease", 0)),
                      int(b.get("lease_start", 0)))

    def give_back(self, namespace: str, start: int, end: int, step: int, lease: int) -> bool:
        answer = self._request("POST", f"/v1/blocks/{namespace}/give-back?lease={lease}"
                                       f"&start={start}&end={end}&step={step}")
        return bool(answer.get("given_back"))

    def info(self, namespace: str) -> NamespaceInfo:
        answer = self._request("GET", f"/v1/namespaces/{namespace}")
        kind = str(answer.get("kind"))
        spec = None
        if kind == "sequence":
            s = answer["settings"]
            spec = SequenceSpec(width=int(s["width"]), step=int(s["step"]),
                                offset=int(s["offset"]),
                                residues=tuple(int(r) for r in s.get("residues") or ())
                                or (int(s["offset"]),))
        return NamespaceInfo(str(answer.get("namespace", namespace)), kind, spec, answer)

    def decode(self, namespace: str, id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._request(
            "GET", f"/v1/decode/{namespace}/{urllib.parse.quote(id, safe='')}")
        return answer

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()


class AsyncHttpTransport:
    """`HttpTransport` for asyncio: each call runs in a worker thread."""

    def __init__(self, url: str, label: str, token: Optional[str] = None,
                 tls: Optional[Tls] = None, timeout: float = 5.0) -> None:
        self.sync = HttpTransport(url, label, token, tls, timeout)
        self.label = label

    async def next(self, namespace: str, count: int, kind: str, shard: Optional[int] = None,
                   key: Optional[int] = None) -> list[Id]:
        return await asyncio.to_thread(self.sync.next, namespace, count, kind, shard, key)

    async def block(self, namespace: str, count: int, min_start: Optional[int] = None,
                    extends: Optional[int] = None) -> Leased:
        return await asyncio.to_thread(self.sync.block, namespace, count, min_start, extends)

    async def give_back(self, namespace: str, start: int, end: int, step: int,
                        lease: int) -> bool:
        return await asyncio.to_thread(self.sync.give_back, namespace, start, end, step, lease)

    async def info(self, namespace: str) -> NamespaceInfo:
        return await asyncio.to_thread(self.sync.info, namespace)

    async def decode(self, namespace: str, id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.decode, namespace, id)

    async def close(self) -> None:
        self.sync.close()
