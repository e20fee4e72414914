"""Typed handles per kind (`client.sequence(...)` and the rest) and the Prometheus view of a
client's counters (`idmint.metrics`), against a live node."""

from __future__ import annotations

import asyncio
import importlib.util
import urllib.error
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import idmint
import idmint.metrics
from topology import Topology

EXAMPLE = Path(__file__).parent.parent / "examples" / "typed_ids.py"
FIXED = idmint.ClientConfig(buffer=idmint.BufferPolicy(fixed_block=1000))


@pytest.fixture
def node() -> Iterator[Topology]:
    topology = Topology("single")
    try:
        yield topology
    finally:
        topology.close()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_the_typed_example_runs(node: Topology, transport: str) -> None:
    # The file run_tests.sh checks with mypy --strict: its static types hold at run time.
    spec = importlib.util.spec_from_file_location("typed_ids", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    if transport == "grpc":
        example.main(node.urls("grpc"))
    else:
        example.main((), node.urls("http"))


def test_each_handle_gives_its_kind_and_refuses_the_others(node: Topology) -> None:
    kinds = {"seq": "sequence", "flake": "snowflake", "uuids": "uuid7", "ulids": "ulid"}
    with idmint.Client(node.urls("grpc")) as client:
        handles = {"sequence": client.sequence, "snowflake": client.snowflake,
                   "uuid7": client.uuid7, "ulid": client.ulid}
        types = {"sequence": int, "snowflake": int, "uuid7": uuid.UUID, "ulid": str}
        for name, kind in kinds.items():
            for handle_kind, make in handles.items():
                ids = make(name)
                if handle_kind == kind:
                    got = ids.next_batch(2)
                    assert [type(i) for i in got] == [types[kind]] * 2
                    assert got[0] < got[1] < ids.next()
                    continue
                for _ in range(2):  # at first use, and again: never an id of the wrong kind
                    with pytest.raises(idmint.WrongKind) as e:
                        ids.next()
                    assert e.value.code == "wrong_kind"
                    assert e.value.message == (
                        f"namespace {name} is a {kind} namespace, not {handle_kind}: "
                        f"client.{handle_kind}() is for {handle_kind} namespaces; "
                        f"use client.{kind}({name!r})")
        # The untyped call still serves every kind.
        assert isinstance(client.next("uuids"), uuid.UUID)


def test_a_time_ordered_handle_never_creates_a_namespace(node: Topology) -> None:
    with idmint.Client(node.urls("grpc")) as client:
        for make in (client.snowflake, client.uuid7, client.ulid):
            with pytest.raises(idmint.UnknownNamespace):
                make("absent").next()
    with pytest.raises(urllib.error.HTTPError) as e:
        node.node_state("a", "absent")
    assert e.value.code == 404
    # A sequence handle creates it as next() does (auto_create).
    with idmint.Client(node.urls("grpc")) as client:
        assert client.sequence("absent").next() == 1


def test_async_handles_are_typed_and_checked(node: Topology) -> None:
    async def run() -> None:
        async with idmint.AsyncClient(node.urls("grpc")) as client:
            orders = client.sequence("seq")
            assert orders.try_next() is None  # not set up yet: no network in try_next
            first = await orders.next()
            assert (await orders.next_batch(2)) == [first + 1, first + 2]
            assert orders.try_next() == first + 3
            with pytest.raises(idmint.WrongKind):
                await client.ulid("uuids").next()
            assert len(await client.ulid("ulids").next()) == 26
            assert (await orders.stats()).served == 4

    asyncio.run(run())


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """(sample name, namespace) -> value, from the text exposition."""
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, sample.labels["namespace"])] = sample.value
            assert sample.labels["kind"] in ("sequence", "snowflake", "uuid7", "ulid")
    return out


def test_metrics_expose_the_clients_counters(node: Topology) -> None:
    registry = CollectorRegistry()
    client = idmint.Client(node.urls("grpc"), config=FIXED)
    idmint.metrics.register(client, registry)
    assert _scrape(registry) == {}  # nothing set up yet
    orders = client.sequence("seq_fixed")
    taken = orders.next_batch(3)
    assert taken == [1, 2, 3]
    client.ulid("ulids").next_batch(5)
    stats = orders.stats()
    m = _scrape(registry)
    assert m[("idmint_client_served_ids_total", "seq_fixed")] == 3
    assert m[("idmint_client_buffered_ids", "seq_fixed")] == stats.buffered
    assert m[("idmint_client_refills_total", "seq_fixed")] == stats.refills >= 1
    assert m[("idmint_client_given_back_ids_total", "seq_fixed")] == 0
    assert m[("idmint_client_burned_ids_total", "seq_fixed")] == 0
    assert m[("idmint_client_served_ids_total", "ulids")] == 5
    assert m[("idmint_client_refills_total", "ulids")] >= 1
    received = 1000 * stats.refills
    assert stats.buffered == received - 3
    client.close()
    m = _scrape(registry)
    # A clean close hands every unused id back: the give-backs and burns add up.
    assert m[("idmint_client_given_back_ids_total", "seq_fixed")] == received - 3
    assert m[("idmint_client_burned_ids_total", "seq_fixed")] == 0
    assert m[("idmint_client_buffered_ids", "seq_fixed")] == 0
    # One client per registry: a second would clash with the first's names.
    with idmint.Client(node.urls("grpc")) as other, pytest.raises(ValueError):
        idmint.metrics.register(other, registry)
