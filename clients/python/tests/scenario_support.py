"""What the conformance runner needs besides the nodes: a client built from a scenario's
options, id kind checks, and worker pools (threads, asyncio tasks)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any, Awaitable, Callable, Optional, TypeVar, Union

import idmint
from idmint.ulid import ALPHABET, parse_ulid
from topology import Topology, scenarios

DATA = scenarios()
T = TypeVar("T")


def client_args(topology: Topology, scenario: dict[str, Any]) -> dict[str, Any]:
    options = scenario.get("client", {})
    token = DATA["tokens"][options["token"]] if "token" in options else None
    tls = None
    ca = options.get("ca")
    ca_file = {True: "ca.pem", "other": "other-ca.pem"}.get(ca) if ca is not None else None
    if topology.tls and (ca_file or options.get("cert")):
        cert = options.get("cert")
        tls = idmint.Tls(ca_file=topology.certs / ca_file if ca_file else None,
                         cert_file=topology.certs / "client.pem" if cert else None,
                         key_file=topology.certs / "client.key" if cert else None)
    config = idmint.ClientConfig()
    if "fixed_block" in options:
        config = idmint.ClientConfig(buffer=idmint.BufferPolicy(fixed_block=options["fixed_block"]))
    return {"token": token, "tls": tls, "config": config}


def make_client(topology: Topology, scenario: dict[str, Any], transport: str,
                cls: Any = idmint.Client) -> Any:
    urls = topology.urls(transport)
    args = client_args(topology, scenario)
    if transport == "http":
        return cls([], http_urls=urls, **args)
    return cls(urls, **args)


def order_key(id_: idmint.Id) -> int:
    if isinstance(id_, int):
        return id_
    if isinstance(id_, uuid.UUID):
        return id_.int
    return parse_ulid(id_)[0]


def check_kind(namespace: str, id_: idmint.Id) -> None:
    spec = DATA["namespaces"][namespace]
    kind = spec["kind"]
    if kind in ("sequence", "snowflake"):
        assert isinstance(id_, int) and 1 <= id_ <= spec.get("max", 2**63 - 1), id_
    elif kind == "uuid7":
        assert isinstance(id_, uuid.UUID) and id_.version == 7 and id_.variant == uuid.RFC_4122, id_
    elif kind == "ulid":
        assert isinstance(id_, str) and len(id_) == 26 and set(id_) <= set(ALPHABET), id_
        assert id_[0] <= "7", id_
    else:
        raise AssertionError(f"unknown id kind {kind}")


def assert_increasing(ids: list[idmint.Id], what: str) -> None:
    keys = [order_key(i) for i in ids]
    for i in range(1, len(keys)):
        assert keys[i] > keys[i - 1], f"{what}: id #{i} {ids[i]} not above {ids[i - 1]}"


def in_threads(workers: int, work: Callable[[int], T]) -> list[T]:
    """`work(i)` on `workers` threads at once; re-raises the first failure."""
    results: list[Optional[T]] = [None] * workers
    errors: list[BaseException] = []
    start = threading.Barrier(workers)

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


async def in_tasks(workers: int, work: Callable[[int], Awaitable[T]]) -> list[T]:
    return list(await asyncio.gather(*(work(i) for i in range(workers))))


Client = Union[idmint.Client, idmint.AsyncClient]
