"""A shard or key on a request for ids, without a node: the checks made before anything is
sent, and the request each transport builds."""

from __future__ import annotations

import pytest

import idmint
from idmint.grpc_transport import pb
from idmint.http_transport import ids_path
from idmint.names import check_route


def test_neither_is_no_route_and_one_is_a_route() -> None:
    assert check_route(None, None) is False
    assert check_route(0, None) is True
    assert check_route(None, 2**64 - 1) is True


@pytest.mark.parametrize("shard,key", [(1, 2), (0, 0)])
def test_both_are_refused_before_sending(shard: int, key: int) -> None:
    with pytest.raises(idmint.InvalidRequest, match="shard or key"):
        check_route(shard, key)


@pytest.mark.parametrize("value", [-1, 2**64, True, 1.5, "7"])
def test_a_value_that_is_not_a_64_bit_whole_number_is_refused(value: object) -> None:
    with pytest.raises(idmint.InvalidRequest, match="shard must be a whole number"):
        check_route(value, None)  # type: ignore[arg-type]
    with pytest.raises(idmint.InvalidRequest, match="key must be a whole number"):
        check_route(None, value)  # type: ignore[arg-type]


def test_the_client_refuses_both_without_a_node() -> None:
    # A url nothing listens on: the refusal comes before any call.
    client = idmint.Client(["http://127.0.0.1:9"])
    try:
        with pytest.raises(idmint.InvalidRequest):
            client.next("photos", shard=1, key=2)
        with pytest.raises(idmint.InvalidRequest):
            client.next_batch("photos", 3, shard=1, key=2)
        with pytest.raises(idmint.InvalidCount):
            client.next_batch("photos", 0, shard=1)
    finally:
        client.close()


def test_http_sends_the_parameter_given() -> None:
    assert ids_path("photos", 3) == "/v1/ids/photos?count=3"
    assert ids_path("photos", 3, shard=7) == "/v1/ids/photos?count=3&shard=7"
    assert ids_path("photos", 1, key=2**64 - 1) == f"/v1/ids/photos?count=1&key={2**64 - 1}"


def test_grpc_sets_only_the_field_given() -> None:
    request = pb.NextRequest(namespace="photos", count=3, shard=7, key=None)
    assert request.HasField("shard") and not request.HasField("key")
    assert request.shard == 7
    request = pb.NextRequest(namespace="photos", count=3, shard=None, key=None)
    assert not request.HasField("shard") and not request.HasField("key")
