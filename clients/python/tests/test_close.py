"""A clean close burns nothing, on gRPC and on HTTP, also after a refill fetched a second
block while the first still held ids: the node joins the refill's lease to the previous one
(`extends`), so one tail gives every unused id back."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

import pytest

import idmint
from topology import Topology

#: Blocks of 100, a refill as soon as one id is taken: the client holds two blocks at close.
EAGER = idmint.ClientConfig(buffer=idmint.BufferPolicy(fixed_block=100, low_water=1.0))


@pytest.fixture
def node() -> Iterator[Topology]:
    topology = Topology("single")
    try:
        yield topology
    finally:
        topology.close()


def client_of(node: Topology, transport: str, config: idmint.ClientConfig) -> idmint.Client:
    if transport == "grpc":
        return idmint.Client(node.urls("grpc"), config=config)
    return idmint.Client(http_urls=node.urls("http"), config=config)


def wait_for_refills(client: idmint.Client, namespace: str, refills: int) -> None:
    deadline = time.monotonic() + 10
    while client.stats(namespace).refills < refills:
        assert time.monotonic() < deadline, client.stats(namespace)
        time.sleep(0.01)


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_close_after_a_refill_burns_nothing(node: Topology, transport: str) -> None:
    client = client_of(node, transport, EAGER)
    assert client.next("seq_fixed") == 1
    wait_for_refills(client, "seq_fixed", 2)
    client.close()
    state = node.node_state("a", "seq_fixed")["state"]
    assert (state["ids_served"], state["ids_burned"]) == (1, 0), state
    with client_of(node, transport, EAGER) as again:
        assert again.next("seq_fixed") == 2


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_the_client_counts_the_close_after_a_refill(node: Topology, transport: str) -> None:
    client = client_of(node, transport, EAGER)
    handle = client.namespace("seq_fixed")
    assert [handle.next() for _ in range(3)] == [1, 2, 3]
    wait_for_refills(client, "seq_fixed", 2)
    client.close()
    s = handle.stats()
    assert (s.served, s.burned, s.given_back, s.buffered) == (3, 0, 197, 0), s


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_the_async_client_closes_after_a_refill_without_burning(node: Topology,
                                                                 transport: str) -> None:
    async def main() -> idmint.Stats:
        urls = node.urls(transport)
        client = (idmint.AsyncClient(urls, config=EAGER) if transport == "grpc"
                  else idmint.AsyncClient(http_urls=urls, config=EAGER))
        handle = await client.namespace("seq_fixed")
        assert await handle.next() == 1
        deadline = time.monotonic() + 10
        while handle.stats().refills < 2:
            assert time.monotonic() < deadline, handle.stats()
            await asyncio.sleep(0.01)
        await client.close()
        return handle.stats()

    s = asyncio.run(main())
    assert (s.served, s.burned, s.given_back) == (1, 0, 199), s
    with client_of(node, transport, EAGER) as again:
        assert again.next("seq_fixed") == 2


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_few_ids_then_a_pause_then_close_burns_nothing(node: Topology, transport: str) -> None:
    """The adopter's trial: three ids, a pause long enough for the refill task to look at the
    demand, a close. Three ids are no demand for a bigger block, and nothing is burned."""
    client = client_of(node, transport, idmint.ClientConfig())
    assert [client.next("seq") for _ in range(3)] == [1, 2, 3]
    time.sleep(0.3)
    assert client.stats("seq").next_fetch == 1000
    client.close()
    s = client.stats("seq")
    assert (s.served, s.burned) == (3, 0), s
    with client_of(node, transport, idmint.ClientConfig()) as again:
        assert again.next("seq") == 4
