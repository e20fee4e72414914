"""The shared client conformance suite (clients/conformance/README.md) run against this
client: every scenario of scenarios.json, with each transport it lists, with the sync `Client`
and, where the README asks for both, the asyncio `AsyncClient`; each against nodes started for
it. An unknown scenario kind fails."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import pytest

import idmint
from idmint.grpc_transport import error_of
from idmint.http_transport import http_error
from scenario_support import (DATA, assert_increasing, check_kind, client_args, in_tasks,
                              in_threads, make_client, order_key)
from topology import CONFORMANCE, Topology

import grpc

#: Kinds run with both clients; the others with the sync one.
BOTH = {"unique_concurrent", "give_back", "failover", "error"}
NO_NODES = {"error_table", "decode_offline"}


def _cases() -> list[Any]:
    cases = []
    for s in DATA["scenarios"]:
        transports = [None] if s["kind"] in NO_NODES else s.get("transports", ["grpc"])
        flavors = ["sync", "async"] if s["kind"] in BOTH else ["sync"]
        for transport in transports:
            for flavor in flavors:
                name = f"{s['kind']}: {s['name']}"
                if transport:
                    name += f" [{transport}, {flavor}]"
                cases.append(pytest.param(s, transport, flavor, id=name))
    return cases


@pytest.mark.parametrize("scenario,transport,flavor", _cases())
def test_scenario(scenario: dict[str, Any], transport: str, flavor: str) -> None:
    runner = RUNNERS.get(scenario["kind"])
    if runner is None:
        pytest.fail(f"unknown scenario kind {scenario['kind']!r}: this runner cannot run it")
    if scenario["kind"] in NO_NODES:
        runner(scenario, None, flavor)
        return
    topology = Topology(scenario["topology"])
    try:
        runner(scenario, topology, (transport, flavor))
    finally:
        topology.close()


def unique_concurrent(s: dict[str, Any], topo: Topology, mode: tuple[str, str]) -> None:
    transport, flavor = mode
    ns, workers, each = s["namespace"], s["workers"], s["ids_per_worker"]
    if flavor == "sync":
        with make_client(topo, s, transport) as client:
            per_worker = in_threads(workers, lambda i: [client.next(ns) for _ in range(each)])
    else:
        async def run() -> list[list[idmint.Id]]:
            async with make_client(topo, s, transport, idmint.AsyncClient) as client:
                async def work(i: int) -> list[idmint.Id]:
                    return [await client.next(ns) for _ in range(each)]
                return await in_tasks(workers, work)
        per_worker = asyncio.run(run())
    check_unique(ns, per_worker, workers * each)


def check_unique(ns: str, per_worker: list[list[idmint.Id]], total: int) -> None:
    everything = [i for ids in per_worker for i in ids]
    assert len(everything) == total
    for w, ids in enumerate(per_worker):
        assert_increasing(ids, f"worker {w}")
    assert len({order_key(i) for i in everything}) == total, "an id was handed out twice"
    for i in everything:
        check_kind(ns, i)


def batches(s: dict[str, Any], topo: Topology, mode: tuple[str, str]) -> None:
    ns = s["namespace"]
    with make_client(topo, s, mode[0]) as client:
        answers = [client.next_batch(ns, s["batch_size"]) for _ in range(s["batches"])]
    everything = [i for a in answers for i in a]
    for a in answers:
        assert len(a) == s["batch_size"]
    assert_increasing(everything, "batches in order")
    for i in everything:
        check_kind(ns, i)


def give_back(s: dict[str, Any], topo: Topology, mode: tuple[str, str]) -> None:
    transport, flavor = mode
    ns, take = s["namespace"], s["take"]
    first, second = (take_sync if flavor == "sync" else take_async)(topo, s, transport, take)
    node = topo.client_names[0]
    token = client_args(topo, s)["token"]
    state = topo.node_state(node, ns, token=token)["state"]
    assert state["ids_burned"] == 0, state
    assert state["ids_served"] == take, state
    later = (take_sync if flavor == "sync" else take_async)(topo, s, transport, 1)[0]
    assert later[0] == first[-1] + 1, (first[-1], later[0])
    # The client's own account: nothing burned, nothing left, the tail given back.
    assert second.burned == 0 and second.buffered == 0 and second.given_back > 0, second


def take_sync(topo: Topology, s: dict[str, Any], transport: str,
              n: int) -> tuple[list[idmint.Id], idmint.Stats]:
    client = make_client(topo, s, transport)
    ids = [client.next(s["namespace"]) for _ in range(n)]
    client.close()
    return ids, client.stats(s["namespace"])


def take_async(topo: Topology, s: dict[str, Any], transport: str,
               n: int) -> tuple[list[idmint.Id], idmint.Stats]:
    async def run() -> tuple[list[idmint.Id], idmint.Stats]:
        client = make_client(topo, s, transport, idmint.AsyncClient)
        ids = [await client.next(s["namespace"]) for _ in range(n)]
        await client.close()
        return ids, client.stats(s["namespace"])
    return asyncio.run(run())


def failover(s: dict[str, Any], topo: Topology, mode: tuple[str, str]) -> None:
    transport, flavor = mode
    ns, workers = s["namespace"], s["workers"]
    if flavor == "sync":
        with make_client(topo, s, transport) as client:
            n = s["ids_before"]
            before = in_threads(workers, lambda i: [client.next(ns) for _ in range(n)])
            topo.nodes[s["kill"]].kill()
            after = in_threads(workers, lambda i: [client.next(ns) for _ in range(s["ids_after"])])
    else:
        async def run() -> tuple[list[list[idmint.Id]], list[list[idmint.Id]]]:
            async with make_client(topo, s, transport, idmint.AsyncClient) as client:
                async def take(n: int) -> list[list[idmint.Id]]:
                    async def work(i: int) -> list[idmint.Id]:
                        return [await client.next(ns) for _ in range(n)]
                    return await in_tasks(workers, work)
                first = await take(s["ids_before"])
                topo.nodes[s["kill"]].kill()
                return first, await take(s["ids_after"])
        before, after = asyncio.run(run())
    per_worker = [b + a for b, a in zip(before, after, strict=True)]
    check_unique(ns, per_worker, workers * (s["ids_before"] + s["ids_after"]))


def _call_sync(client: idmint.Client, call: dict[str, Any]) -> Any:
    op, ns = call["op"], call["namespace"]
    if op == "next":
        return client.next(ns)
    if op == "next_batch":
        return client.next_batch(ns, call["count"])
    if op == "info":
        return client.info(ns)
    if op == "decode":
        return client.decode(ns, call["id"])
    raise AssertionError(f"unknown op {op!r}")


async def _call_async(client: idmint.AsyncClient, call: dict[str, Any]) -> Any:
    op, ns = call["op"], call["namespace"]
    if op == "next":
        return await client.next(ns)
    if op == "next_batch":
        return await client.next_batch(ns, call["count"])
    if op == "info":
        return await client.info(ns)
    if op == "decode":
        return await client.decode(ns, call["id"])
    raise AssertionError(f"unknown op {op!r}")


def error(s: dict[str, Any], topo: Topology, mode: tuple[str, str]) -> None:
    transport, flavor = mode
    call, expected = s["call"], s["expect"]
    if flavor == "sync":
        client = make_client(topo, s, transport)
        try:
            caught, before = _provoke_sync(client, call)
        finally:
            client.close()
    else:
        async def run() -> tuple[idmint.IdmintError, int]:
            client = make_client(topo, s, transport, idmint.AsyncClient)
            try:
                return await _provoke_async(client, call)
            finally:
                await client.close()
        caught, before = asyncio.run(run())
    assert caught.code == expected, f"{type(caught).__name__}: {caught}"
    assert type(caught) is idmint.error_class(expected), type(caught)
    assert caught.message
    if "ids_before" in s:
        assert before == s["ids_before"]


def _provoke_sync(client: idmint.Client, call: dict[str, Any]) -> tuple[idmint.IdmintError, int]:
    for step in call.get("after", []):
        _call_sync(client, step)
    if call.get("after_close"):
        client.close()
    taken = 0
    try:
        if call["op"] == "take":
            for _ in range(call["limit"]):
                client.next(call["namespace"])
                taken += 1
        else:
            _call_sync(client, call)
    except idmint.IdmintError as e:
        return e, taken
    raise AssertionError(f"no error from {call}")


async def _provoke_async(client: idmint.AsyncClient,
                         call: dict[str, Any]) -> tuple[idmint.IdmintError, int]:
    for step in call.get("after", []):
        await _call_async(client, step)
    if call.get("after_close"):
        await client.close()
    taken = 0
    try:
        if call["op"] == "take":
            for _ in range(call["limit"]):
                await client.next(call["namespace"])
                taken += 1
        else:
            await _call_async(client, call)
    except idmint.IdmintError as e:
        return e, taken
    raise AssertionError(f"no error from {call}")


def info(s: dict[str, Any], topo: Topology, mode: tuple[str, str]) -> None:
    with make_client(topo, s, mode[0]) as client:
        got = client.info(s["namespace"])
    assert got.kind == s["expect_kind"] and got.namespace == s["namespace"], got


class _Status(grpc.RpcError):
    def __init__(self, status: grpc.StatusCode, details: str, metadata: Any) -> None:
        self._status, self._details, self._metadata = status, details, metadata

    def code(self) -> grpc.StatusCode:
        return self._status

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._metadata


def error_table(s: dict[str, Any], _topo: None, _flavor: str) -> None:
    for entry in DATA["error_codes"]:
        code = entry["code"]
        cls = idmint.error_class(code)
        assert cls is not idmint.IdmintError and cls.code == code, code
        if entry["grpc"] is not None:
            status = getattr(grpc.StatusCode, entry["grpc"])
            e = error_of(_Status(status, f"{code}: what happened", (("idmint-error-code", code),)),
                         "node #1")
            assert type(e) is cls and e.code == code and e.message == "what happened", e
        if entry["http"] is not None:
            body = json.dumps({"error": {"code": code, "message": "what happened"}}).encode()
            e = http_error("node #1", entry["http"], body)
            assert type(e) is cls and e.code == code and e.message == "what happened", e
    for entry in DATA["client_error_codes"]:
        assert idmint.error_class(entry["code"]) is not idmint.IdmintError, entry
    e = error_of(_Status(grpc.StatusCode.FAILED_PRECONDITION, "a_newer_code: later",
                         (("idmint-error-code", "a_newer_code"),)), "node #1")
    assert type(e) is idmint.IdmintError and e.code == "a_newer_code" and e.message == "later"
    e = http_error("node #1", 418, b'{"error": {"code": "a_newer_code", "message": "later"}}')
    assert type(e) is idmint.IdmintError and e.code == "a_newer_code"


def decode_offline(s: dict[str, Any], _topo: None, _flavor: str) -> None:
    cases = json.loads((CONFORMANCE / s["file"]).read_text())["cases"]
    assert len(cases) > 40
    for case in cases:
        if case.get("layout") == "composite" or "step" in case or "shards" in case:
            _route_case(case)
            continue
        if "bits" in case:
            layout: Any = idmint.Layout.custom(*case["bits"], unit=case["unit"],
                                               epoch_unix_ms=case["epoch"])
            epoch = None
        else:
            layout, epoch = case["layout"], case.get("epoch")
        if case.get("error"):
            with pytest.raises(idmint.InvalidId):
                idmint.decode(case["id"], layout, epoch)
            continue
        got = idmint.decode(case["id"], layout, epoch).as_dict()
        assert got == case["expect"], case


def _route(case: dict[str, Any]) -> dict[str, object]:
    """What `idmint decode --layout composite`, `decode --step` or `shard-for` answers for a
    case, made with the package's routing helpers."""
    if "shards" in case:
        key = idmint.keys.parse_u64(case["key"], "key")
        return {"kind": "shard_for", "key": str(key), "shards": case["shards"],
                "shard": idmint.shard_for(key, case["shards"])}
    if "step" in case:
        n = idmint.keys.parse_u64(case["id"])
        out: dict[str, object] = {"kind": "residue", "id": str(n), "step": case["step"],
                                  "residue": idmint.residue_of(n, case["step"])}
        if "offsets" in case:
            out["member"] = idmint.member_of(n, case["step"], case["offsets"])
        return out
    k = idmint.CompositeKey.parse(case["id"])
    assert idmint.CompositeKey.parse(str(k)) == k
    return {"kind": "composite", "id": str(k), "shard": k.shard, "local": str(k.local)}


def _route_case(case: dict[str, Any]) -> None:
    if case.get("error"):
        with pytest.raises(idmint.InvalidId):
            _route(case)
        return
    assert _route(case) == case["expect"], case


RUNNERS: dict[str, Callable[..., None]] = {
    "unique_concurrent": unique_concurrent, "batches": batches, "give_back": give_back,
    "failover": failover, "error": error, "info": info, "error_table": error_table,
    "decode_offline": decode_offline,
}
