"""Routing by the shard map against three live nodes sharing one PostgreSQL authority and the
shard-owned namespace `photos` (the `owned` topology: 64 shards in ranges of 8). Needs
PostgreSQL (an unreachable server fails the test, never skips it).

The ranges are spread first: range r is asked for through node r % 3 alone, which takes its
lease. A client of the first node only (no map to follow) then has most requests forwarded; a
client of all three, sync or asyncio, once it learned the map has none: each request went to
its shard's holder. Every id decodes to the shard asked for (or its key's)."""

from __future__ import annotations

import asyncio
import random
import re
import urllib.request
from typing import Iterator, Optional

import pytest

import idmint
from topology import Topology

SHARDS, PER_RANGE, REQUESTS = 64, 8, 90


@pytest.fixture(scope="module")
def owned() -> Iterator[Topology]:
    topology = Topology("owned")
    try:
        urls = topology.urls("grpc")
        for r in range(SHARDS // PER_RANGE):
            with idmint.Client(urls[r % 3]) as one:
                one.next("photos", shard=r * PER_RANGE)
        yield topology
    finally:
        topology.close()


def forwards(topology: Topology) -> int:
    """Requests for photos the three nodes forwarded, summed."""
    total = 0
    for node in topology.nodes.values():
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http}/metrics", timeout=10) as m:
            text = m.read().decode()
        found = re.search(r'^idmint_shard_forwards_total\{namespace="photos"\} (\d+)$', text,
                          re.MULTILINE)
        total += int(found.group(1)) if found else 0
    return total


def route(rng: random.Random, i: int) -> tuple[Optional[int], Optional[int], int]:
    """(shard, key, the shard they name): by shard on even requests, by key on odd ones."""
    if i % 2 == 0:
        shard = rng.randrange(SHARDS)
        return shard, None, shard
    key = rng.randrange(2**64)
    return None, key, key % SHARDS


def check(ids: list[idmint.Id], shard: int, count: int) -> None:
    assert len(ids) == count
    for id in ids:
        assert isinstance(id, int) and idmint.shard_of(id, "instagram") == shard


def ask(client: idmint.Client, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(REQUESTS):
        shard, key, expect = route(rng, i)
        count = rng.randint(1, 3)
        check(client.next_batch("photos", count, shard=shard, key=key), expect, count)


def test_a_client_of_one_node_has_its_other_shards_forwarded(owned: Topology) -> None:
    before = forwards(owned)
    with idmint.Client(owned.urls("grpc")[0]) as client:
        ask(client, 1)
    unrouted = forwards(owned) - before
    assert unrouted >= REQUESTS // 3, f"{unrouted} of {REQUESTS} forwarded"


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_client_of_all_nodes_sends_each_shard_to_its_holder(owned: Topology,
                                                              transport: str) -> None:
    before = forwards(owned)
    urls = owned.urls(transport)
    with (idmint.Client(urls) if transport == "grpc" else idmint.Client(http_urls=urls)) as c:
        ask(c, 2)
    routed = forwards(owned) - before
    assert routed <= 2, f"{routed} of {REQUESTS} forwarded with the map"


def test_an_async_client_of_all_nodes_sends_each_shard_to_its_holder(owned: Topology) -> None:
    async def run() -> None:
        rng = random.Random(3)
        async with idmint.AsyncClient(owned.urls("grpc")) as client:
            for i in range(REQUESTS):
                shard, key, expect = route(rng, i)
                count = rng.randint(1, 3)
                check(await client.next_batch("photos", count, shard=shard, key=key), expect,
                      count)

    before = forwards(owned)
    asyncio.run(run())
    routed = forwards(owned) - before
    assert routed <= 2, f"{routed} of {REQUESTS} forwarded with the map"
