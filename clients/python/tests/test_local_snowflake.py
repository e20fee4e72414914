"""`Client.local_snowflake` against live nodes: the pool shared with the node (no duplicates
with node-made ids, distinct workers), release with a floor above the last id, the layout
lock, the async handle, and a client with HTTP urls alone refused."""

from __future__ import annotations

import asyncio
import threading
from typing import Iterator

import pytest

import idmint
from idmint.v1 import idmint_pb2 as pb, idmint_pb2_grpc as rpc
from topology import Topology

import grpc

TWITTER = idmint.Layout.preset("twitter")


@pytest.fixture
def node() -> Iterator[Topology]:
    topology = Topology("single")
    try:
        yield topology
    finally:
        topology.close()


def group(node: Topology, name: str) -> pb.WorkerGroupAnswer:
    with grpc.insecure_channel(f"127.0.0.1:{node.nodes['a'].grpc}") as channel:
        return rpc.IdmintStub(channel).WorkerGroup(pb.WorkerGroupRequest(group=name))


def test_local_ids_share_the_pool_with_the_node_and_never_collide(node: Topology) -> None:
    with idmint.Client(node.urls("grpc")) as client:
        node_ids = client.next_batch("flake", 1000)
        node_worker = TWITTER.split(int(node_ids[0]))[1]
        with client.local_snowflake("flake") as a, client.local_snowflake("flake") as b:
            assert len({a.worker, b.worker, node_worker}) == 3
            made: dict[int, list[int]] = {}

            def run(handle: idmint.LocalSnowflake) -> None:
                made[handle.worker] = [handle.next() for _ in range(50_000)]

            threads = [threading.Thread(target=run, args=(h,)) for h in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        every = [int(i) for i in node_ids] + made[a.worker] + made[b.worker]
        assert len(set(every)) == len(every)
        for worker, ids in made.items():
            assert ids == sorted(ids) and len(set(ids)) == len(ids)
            assert {TWITTER.split(i)[1] for i in ids} == {worker}


def test_close_releases_with_a_floor_above_the_last_id(node: Topology) -> None:
    with idmint.Client(node.urls("grpc")) as client:
        handle = client.local_snowflake("flake")
        last = [handle.next() for _ in range(10_000)][-1]
        handle.close()
        with pytest.raises(idmint.Closed):
            handle.next()
    slot = next(s for s in group(node, "flake").slots if s.worker == handle.worker)
    assert not slot.HasField("expires_in_ms"), "the lease was not released"
    assert slot.floor_unix_ms > TWITTER.unix_ms(TWITTER.split(last)[0])
    assert " lease " not in slot.holder


def test_a_layout_other_than_the_namespaces_is_refused(node: Topology) -> None:
    with idmint.Client(node.urls("grpc")) as client:
        config = idmint.LocalSnowflakeConfig(layout=idmint.Layout.preset("sonyflake"))
        with pytest.raises(idmint.IdmintError) as refused:
            client.local_snowflake("flake", config)
        assert refused.value.code == "layout_conflict"
        with pytest.raises(idmint.WrongKind):
            client.local_snowflake("seq")


def test_http_urls_alone_cannot_lease(node: Topology) -> None:
    with idmint.Client(http_urls=node.urls("http")) as client:
        with pytest.raises(idmint.InvalidRequest, match="gRPC"):
            client.local_snowflake("flake")


def test_the_async_client_makes_local_ids(node: Topology) -> None:
    async def run() -> list[int]:
        async with idmint.AsyncClient(node.urls("grpc")) as client:
            async with await client.local_snowflake("js") as handle:
                return [handle.next() for _ in range(1000)]

    ids = asyncio.run(run())
    assert ids == sorted(set(ids)) and all(i < 2 ** 53 for i in ids)
