#!/usr/bin/env python3
"""Benchmark of the Python client (not a test): prints two ratios, each from one run.

1. Cached ids per second on one thread, `next()` on a `LocalIds` handle (the ids come from the
   client's buffer; refills run in the background), against a bare `itertools.count` loop.
   Target: at least 0.5x. The shared path (`Namespace.next`, `Client.next`) is printed beside.
2. Ids per second from this process against one local idmint node (`Client.next`), against
   redis-py `INCR` on the Redis at 127.0.0.1:6379 (or $REDIS_URL). Target: at least 10x.

Rounds alternate between the contenders; the best round of each is reported.
Usage: python bench.py [--rounds N] [--seconds S]. Starts its own node ($IDMINT_BIN, else
<repo>/target/debug/idmint) in a temporary directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import idmint

REPO = Path(__file__).resolve().parents[2]


def timed_rate(take: Callable[[], object], seconds: float) -> float:
    """Calls `take` in batches of 10,000 for at least `seconds`; ids per second."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(10_000):
            take()
        count += 10_000
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - start)


def start_node(workdir: str) -> tuple[subprocess.Popen[str], str]:
    binary = os.environ.get("IDMINT_BIN") or str(REPO / "target" / "debug" / "idmint")
    if not os.access(binary, os.X_OK):
        sys.exit(f"bench.py: the idmint binary is missing: {binary} (set IDMINT_BIN)")
    import socket
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    node = subprocess.Popen(
        [binary, "serve", "--http", f"127.0.0.1:{ports[0]}", "--grpc", f"127.0.0.1:{ports[1]}",
         "--data-dir", workdir], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "RUST_LOG": "warn"})
    assert node.stdout is not None
    for line in node.stdout:
        if line.startswith("idmint listening on "):
            return node, f"http://127.0.0.1:{ports[1]}"
    sys.exit("bench.py: the node exited before listening")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    import redis

    r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    r.ping()
    key = f"idmint-bench-{os.getpid()}"
    with tempfile.TemporaryDirectory() as workdir:
        node, url = start_node(workdir)
        try:
            with idmint.Client([url]) as client:
                handle = client.namespace("bench")
                local = handle.local()
                counter = itertools.count(1)
                for take in (local.__next__, handle.next, lambda: client.next("bench")):
                    timed_rate(take, args.seconds)  # warm-up: blocks grow with demand
                best = {"count": 0.0, "local": 0.0, "handle": 0.0, "client": 0.0, "incr": 0.0}
                for _ in range(args.rounds):
                    best["count"] = max(best["count"], timed_rate(counter.__next__, args.seconds))
                    best["local"] = max(best["local"], timed_rate(local.__next__, args.seconds))
                    best["handle"] = max(best["handle"], timed_rate(handle.next, args.seconds))
                    best["client"] = max(best["client"], timed_rate(
                        lambda: client.next("bench"), args.seconds))
                    best["incr"] = max(best["incr"],
                                       timed_rate(lambda: r.incr(key), args.seconds / 4))
                local.close()
                stats = handle.stats()
        finally:
            node.terminate()
            node.wait(timeout=15)
            r.delete(key)
    print(f"python {sys.version.split()[0]}, best of {args.rounds} alternating rounds of "
          f"{args.seconds} s")
    print(f"{'bare itertools.count':<34}{best['count'] / 1e6:10.2f} M ids/s")
    print(f"{'LocalIds next() (cached)':<34}{best['local'] / 1e6:10.2f} M ids/s   "
          f"{best['local'] / best['count']:.2f}x count (target >= 0.5)")
    print(f"{'Namespace.next() (cached, shared)':<34}{best['handle'] / 1e6:10.2f} M ids/s   "
          f"{best['handle'] / best['count']:.2f}x count")
    print(f"{'Client.next(ns) against a node':<34}{best['client'] / 1e6:10.2f} M ids/s   "
          f"{best['client'] / best['incr']:.1f}x redis INCR (target >= 10)")
    print(f"{'redis-py INCR, 127.0.0.1:6379':<34}{best['incr'] / 1e6:10.4f} M ids/s")
    print(f"client: {stats.refills} refills, {stats.waits} waits on an empty buffer, "
          f"next block {stats.next_fetch}")


if __name__ == "__main__":
    main()
