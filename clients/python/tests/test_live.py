"""Behaviour beyond the shared scenarios, against a live node: `LocalIds`, the give-back at
interpreter exit, the HTTP fallback after the gRPC urls fail, remote decoding."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from typing import Iterator

import pytest

import idmint
from topology import Topology, free_port

FIXED = idmint.ClientConfig(buffer=idmint.BufferPolicy(fixed_block=1000))


@pytest.fixture
def node() -> Iterator[Topology]:
    topology = Topology("single")
    try:
        yield topology
    finally:
        topology.close()


def test_local_handles_give_their_tail_back(node: Topology) -> None:
    client = idmint.Client(node.urls("grpc"), config=FIXED)
    with client.local("seq_fixed") as ids:
        taken = [next(ids) for _ in range(10)]
    assert taken == list(range(1, 11))
    client.close()
    state = node.node_state("a", "seq_fixed")["state"]
    assert (state["ids_served"], state["ids_burned"]) == (10, 0), state


def test_local_handles_on_threads_never_share_an_id(node: Topology) -> None:
    with idmint.Client(node.urls("grpc")) as client:
        seen: list[list[int]] = [[] for _ in range(4)]

        def work(i: int) -> None:
            with client.local("seq") as ids:
                seen[i] = [next(ids) for _ in range(30_000)]

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        shared = [client.next("seq") for _ in range(1000)]
        stats = client.stats("seq")
    everything = [x for ids in seen for x in ids] + shared
    assert len(set(everything)) == len(everything) == 121_000
    for ids in seen + [shared]:
        assert ids == sorted(ids)
    assert stats.served + stats.burned + stats.given_back + stats.buffered >= 121_000


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_interpreter_exit_gives_the_tail_back(node: Topology, flavor: str) -> None:
    url = node.urls("grpc")[0]
    body = {
        "sync": f"""
            client = idmint.Client([{url!r}], config=config)
            print([client.next("seq_fixed") for _ in range(7)][-1])
        """,
        "async": f"""
            async def main():
                client = idmint.AsyncClient([{url!r}], config=config)
                print([await client.next("seq_fixed") for _ in range(7)][-1])
            asyncio.run(main())
        """,
    }[flavor]
    script = textwrap.dedent("""
        import asyncio, idmint
        config = idmint.ClientConfig(buffer=idmint.BufferPolicy(fixed_block=1000))
    """) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7"]
    state = node.node_state("a", "seq_fixed")["state"]
    assert (state["ids_served"], state["ids_burned"]) == (7, 0), state
    with idmint.Client([url]) as client:
        assert client.next("seq_fixed") == 8


def test_http_is_the_fallback_when_no_grpc_node_answers(node: Topology) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with idmint.Client([dead], http_urls=node.urls("http"), config=FIXED) as client:
        assert client.next("seq") == 1
        uuids = client.next_batch("uuids", 3)
        assert uuids == sorted(uuids) and all(u.version == 7 for u in uuids)


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_shard_sent_to_an_ordinary_namespace_is_invalid_request(node: Topology,
                                                                  transport: str) -> None:
    urls = node.urls(transport)
    client = idmint.Client(urls) if transport == "grpc" else idmint.Client(http_urls=urls)
    with client:
        for ns in ("seq_fixed", "flake"):
            for route in ({"shard": 7}, {"key": 42}):
                with pytest.raises(idmint.InvalidRequest, match=f'"{ns}"'):
                    client.next_batch(ns, 2, **route)
                with pytest.raises(idmint.InvalidRequest, match=f'"{ns}"'):
                    client.next(ns, **route)
        # Nothing was handed out: the namespace's first id comes next.
        assert client.next("seq_fixed") == 1


def test_the_async_client_sends_a_shard_too(node: Topology) -> None:
    async def main() -> None:
        async with idmint.AsyncClient(node.urls("grpc")) as client:
            with pytest.raises(idmint.InvalidRequest, match='"seq"'):
                await client.next_batch("seq", 3, shard=1)
            with pytest.raises(idmint.InvalidRequest, match='"flake"'):
                await client.next("flake", key=5)
            with pytest.raises(idmint.InvalidRequest, match="shard or key"):
                await client.next("flake", shard=1, key=5)

    asyncio.run(main())


def test_nodes_decode_what_they_issued(node: Topology) -> None:
    with idmint.Client(node.urls("grpc")) as grpc_client, \
            idmint.Client(http_urls=node.urls("http")) as http_client:
        flake = grpc_client.next("flake")
        assert grpc_client.decode("flake", flake) == http_client.decode("flake", flake)
        offline = idmint.decode(flake, "twitter").as_dict()
        online = grpc_client.decode("flake", flake)
        assert online["unix_ms"] == offline["unix_ms"]
        assert online["worker"] == offline["worker"]
        ulid = grpc_client.next("ulids")
        assert grpc_client.decode("ulids", ulid) == http_client.decode("ulids", ulid)
        assert http_client.decode("seq", 5) == {"namespace": "seq", "kind": "sequence",
                                                "id": "5", "in_namespace": True,
                                                "issued": True, "step": 1, "residue": 0}
        assert grpc_client.decode("seq", 5) == http_client.decode("seq", 5)


def test_the_async_client_takes_batches_and_local_tries(node: Topology) -> None:
    async def run() -> None:
        async with idmint.AsyncClient(node.urls("grpc"), config=FIXED) as client:
            handle = await client.namespace("seq")
            first = await handle.next()
            batch = await client.next_batch("seq", 2500)
            assert batch == list(range(first + 1, first + 2501))
            assert handle.try_next() == first + 2501
    asyncio.run(run())


def test_an_async_client_made_outside_the_loop_works_inside_it(node: Topology) -> None:
    client = idmint.AsyncClient(node.urls("grpc"))

    async def run() -> list[idmint.Id]:
        try:
            return [await client.next("uuids"), await client.next("seq")]
        finally:
            await client.close()

    got = asyncio.run(run())
    assert got[1] == 1


def test_bad_settings_are_refused_at_once() -> None:
    for make in (lambda: idmint.Client([]), lambda: idmint.Client(["127.0.0.1:7879"]),
                 lambda: idmint.AsyncClient(["ftp://x"]),
                 lambda: idmint.Client(["http://127.0.0.1:1"], token="a b"),
                 lambda: idmint.AsyncClient(["http://127.0.0.1:1"], token=""),
                 lambda: idmint.Tls(ca_file="/nonexistent/ca.pem"),
                 lambda: idmint.Tls(cert_file="c.pem"),
                 lambda: idmint.BufferPolicy(fixed_block=0),
                 lambda: idmint.ClientConfig(max_time_batch=5000)):
        with pytest.raises(ValueError):
            make()


def test_after_a_failover_no_id_is_burned_over_grpc() -> None:
    """The refill asks with `min_start` (the highest end granted): the surviving regional node,
    whose buffer holds older, lower ids, grants a fresh block above them instead."""
    tiers = Topology("tiers")
    try:
        r1, r2 = tiers.urls("grpc")
        # r2 started last: its block lies above r1's, which the client meets after the kill.
        with idmint.Client([r2, r1], config=FIXED) as client:
            before = [client.next("seq") for _ in range(600)]
            tiers.nodes["r2"].kill()
            after = [client.next("seq") for _ in range(3000)]
            stats = client.stats("seq")
        assert before + after == sorted(set(before + after))
        assert before[0] > 1000, "r1's first block must lie below the ids held"
        assert stats.burned == 0, stats
    finally:
        tiers.close()


def test_counts_are_exact_after_concurrent_use_and_close(node: Topology) -> None:
    """Every id the node leased is accounted for by the client: served (handed out), burned, or
    given back, and the node's own count of served ids agrees once the tail is back."""
    client = idmint.Client(node.urls("grpc"))
    handle = client.namespace("seq")
    got = [[] for _ in range(6)]  # type: list[list[idmint.Id]]

    def work(i: int) -> None:
        for n in range(6000):
            got[i].append(handle.next() if n % 100 else handle.next_batch(7)[0])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    s = client.stats("seq")
    handed_out = 6 * (6000 - 60) + 6 * 60 * 7
    assert (s.served, s.buffered) == (handed_out, 0), s
    state = node.node_state("a", "seq")["state"]
    assert state["ids_served"] == s.served + s.burned, (state, s)
    assert s.given_back > 0
