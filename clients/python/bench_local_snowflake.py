#!/usr/bin/env python3
"""Benchmark (not a test): local snowflake ids per second on one thread, `LocalSnowflake.next()`
(a worker id leased from a running node, renewed by a background thread) beside the PyPI
package `snowflake-id` (`snowflake.SnowflakeGenerator`, the most downloaded snowflake package)
on the twitter layout, in alternating rounds; the best round of each.

Usage: python bench_local_snowflake.py GRPC_URL [ROUNDS]. bench/local_snowflake/run.sh starts
the node (namespace `tweets`, twitter layout) and installs both packages in a virtualenv.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

import idmint
from snowflake import SnowflakeGenerator  # type: ignore[import-not-found]

ROUND_S = 0.5


def rate(take: Callable[[], object]) -> float:
    count = 0
    start = time.perf_counter()
    while True:
        for _ in range(10_000):
            take()
        count += 10_000
        elapsed = time.perf_counter() - start
        if elapsed >= ROUND_S:
            return count / elapsed


def main() -> None:
    url = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with idmint.Client([url]) as client, client.local_snowflake("tweets") as local:
        peer = SnowflakeGenerator(local.worker, epoch=1_288_834_974_657)
        best_local = best_peer = 0.0
        for _ in range(rounds):
            best_local = max(best_local, rate(local.next))
            best_peer = max(best_peer, rate(peer.__next__))
    v = sys.version_info
    print(f"| Python {v.major}.{v.minor}, 1 thread (best of {rounds} alternating {ROUND_S} s "
          "rounds) | idmint `LocalSnowflake.next` | `snowflake-id` `SnowflakeGenerator` | ratio |")
    print("|---|---|---|---|")
    print(f"| twitter 41/10/12 | {best_local / 1e6:.2f}M ids/s | {best_peer / 1e6:.2f}M ids/s | "
          f"{best_local / best_peer:.2f}x |")


if __name__ == "__main__":
    main()
