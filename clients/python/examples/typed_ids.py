"""The README's typed handles, as a program: run_tests.sh checks it with `mypy --strict` against
the installed package, and tests/test_typed.py runs it against a node (`main(urls)`), so the
static types it asserts are the types the ids have at run time."""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Optional, Sequence

from typing_extensions import assert_type

import idmint


def sync(urls: Sequence[str], http_urls: Sequence[str]) -> None:
    with idmint.Client(urls, http_urls=http_urls) as client:
        orders = client.sequence("seq")             # Ids[int]: a sequence namespace
        order = orders.next()
        assert_type(order, int)
        batch = orders.next_batch(3)
        assert_type(batch, list[int])
        assert batch == [order + 1, order + 2, order + 3]
        held: Optional[int] = orders.try_next()
        assert held is None or held > batch[-1]
        ids = orders.local()                        # one thread's handle: next(ids) is an int
        assert next(ids) > order

        event = client.snowflake("flake").next()    # Ids[int]
        assert_type(event, int)
        session = client.uuid7("uuids").next()      # Ids[uuid.UUID]
        assert_type(session, uuid.UUID)
        token = client.ulid("ulids").next()         # Ids[str]
        assert_type(token, str)
        assert (event + 1 > 2**53, session.version, len(token)) == (True, 7, 26)

        try:
            client.sequence("flake").next()         # a snowflake namespace: WrongKind
        except idmint.WrongKind as e:
            assert "snowflake" in e.message
        else:
            raise AssertionError("a sequence handle of a snowflake namespace took an id")

        untyped: idmint.Id = client.next("seq")     # the untyped call stays: int | UUID | str
        assert isinstance(untyped, int) and untyped > order
        stats: idmint.Stats = orders.stats()
        assert stats.kind == "sequence" and stats.served >= 5


async def asynchronous(urls: Sequence[str], http_urls: Sequence[str]) -> None:
    async with idmint.AsyncClient(urls, http_urls=http_urls) as client:
        order = await client.sequence("seq").next()
        assert_type(order, int)
        sessions = await client.uuid7("uuids").next_batch(2)
        assert_type(sessions, list[uuid.UUID])
        assert sessions[0] < sessions[1]
        token = await client.ulid("ulids").next()
        assert_type(token, str)
        event = await client.snowflake("flake").next()
        assert_type(event, int)


def main(urls: Sequence[str], http_urls: Sequence[str] = ()) -> None:
    """gRPC `urls`, else HTTP `http_urls`."""
    sync(urls, http_urls)
    asyncio.run(asynchronous(urls, http_urls))


if __name__ == "__main__":
    main(sys.argv[1:])
