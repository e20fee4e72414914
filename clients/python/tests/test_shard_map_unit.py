"""Choosing the node for a shard from the shard map, without a node: map -> node, key ->
shard, ranges nobody configured holds, and when the map is fetched, used and refreshed."""

from __future__ import annotations

from typing import Any, Optional

from idmint.shard_map import Choice, Entry, Routes, shard_map_of
from idmint.types import NamespaceInfo

A, B, C = "http://10.0.0.1:7879", "http://10.0.0.2:7879", "http://10.0.0.3:7879"


def shard_map(this_node: str, ranges: list[tuple[int, str]],
              error: Optional[str] = None) -> dict[str, Any]:
    return {"logical_shards": 64, "shard_range": 8, "this_node": this_node, "error": error,
            "ranges": [{"range": r, "first_shard": r * 8, "last_shard": r * 8 + 7, "holder": h}
                       for r, h in ranges]}


def node_of(routes: Routes, shard: Optional[int] = None, key: Optional[int] = None) \
        -> Optional[int]:
    choice = routes.choose(shard, key)
    return None if choice is None else choice.node


def test_a_range_goes_to_the_configured_node_whose_advertise_url_holds_it() -> None:
    ranges = [(0, A), (1, B), (2, C), (7, B)]
    # Configured in another order than the urls: node 0 is C, 1 is A, 2 is B.
    routes = Routes.from_answers([(0, shard_map(C, ranges)), (1, shard_map(A, ranges)),
                                  (2, shard_map(B, ranges))])
    assert routes is not None
    assert [node_of(routes, s) for s in (0, 7, 8, 23, 63)] == [1, 1, 2, 0, 2]
    assert routes.choose(17, None) == Choice(node=0, range=2)


def test_a_key_goes_to_its_shard_modulo_the_logical_shards() -> None:
    ranges = [(0, A), (5, B)]
    routes = Routes.from_answers([(0, shard_map(A, ranges)), (1, shard_map(B, ranges))])
    assert routes is not None
    assert routes.shard_of(None, 64 * 1000 + 3) == 3
    assert routes.shard_of(None, 2**64 - 1) == (2**64 - 1) % 64
    assert node_of(routes, key=64 + 2) == 0
    assert node_of(routes, key=41) == 1 == node_of(routes, shard=41)


def test_no_holder_known_means_the_usual_order() -> None:
    ranges = [(0, A), (1, "http://10.9.9.9:7879")]
    routes = Routes.from_answers([(0, shard_map(A, ranges))])
    assert routes is not None
    assert node_of(routes, 3) == 0
    assert [node_of(routes, s) for s in (8, 16, 64)] == [None, None, None]
    # The ranges come from any answer; an answer without a url places no range.
    routes = Routes.from_answers([(0, shard_map("", ranges)), (1, shard_map(A, []))])
    assert routes is not None and node_of(routes, 3) == 1
    assert Routes.from_answers([]) is None


def test_ranges_come_from_an_answer_that_read_the_authority() -> None:
    routes = Routes.from_answers([(0, shard_map(A, [], error="the authority did not answer")),
                                  (1, shard_map(B, [(0, A), (1, B)]))])
    assert routes is not None
    assert (node_of(routes, 0), node_of(routes, 9)) == (0, 1)


def test_the_map_is_read_from_either_transport_and_absent_when_not_owned() -> None:
    http = NamespaceInfo("photos", "snowflake", None, {"state": {"shards": shard_map(A, [])}})
    grpc = NamespaceInfo("photos", "snowflake", None,
                         {"snowflake": {"shards": {**shard_map(A, []), "logical_shards": "64"}}})
    plain = NamespaceInfo("events", "snowflake", None, {"state": {"shards": None}})
    assert shard_map_of(http) == shard_map(A, [])
    grpc_map = shard_map_of(grpc)
    assert grpc_map is not None
    routes = Routes.from_answers([(0, grpc_map)])
    assert routes is not None and routes.logical_shards == 64
    assert shard_map_of(plain) is None
    assert shard_map_of(NamespaceInfo("events", "snowflake", None, {"snowflake": {}})) is None


def test_the_map_is_fetched_first_then_refreshed_once_when_stale() -> None:
    entry = Entry()
    assert entry.plan(0.0, 10.0) == "fetch"
    assert entry.plan(1.0, 10.0) == "use"  # that fetch is in flight: the usual order meanwhile
    entry.fetching, entry.learned_at = False, 2.0
    assert entry.plan(11.0, 10.0) == "use"
    assert entry.plan(12.0, 10.0) == "refresh"
    assert entry.plan(13.0, 10.0) == "use"  # one refresh in flight, no second


def test_a_not_owned_namespace_is_not_asked_about_again_within_the_period() -> None:
    entry = Entry(learned_at=5.0, routes=None)
    assert entry.plan(14.0, 10.0) == "use"
    assert entry.plan(15.0, 10.0) == "refresh"


def test_a_failed_holder_loses_its_range_and_the_map_is_fetched_at_once() -> None:
    entry = Entry(learned_at=1.0,
                  routes=Routes.from_answers([(0, shard_map(A, [(0, A), (1, B)])),
                                              (1, shard_map(B, []))]))
    entry.forget(Choice(node=1, range=1))
    assert entry.plan(2.0, 10.0) == "refresh"
    assert entry.routes is not None
    assert (node_of(entry.routes, 8), node_of(entry.routes, 0)) == (None, 0)
    assert entry.plan(2.0, 10.0) == "use"
