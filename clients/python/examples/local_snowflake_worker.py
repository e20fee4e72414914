"""A process making local snowflake ids, for the conformance suite's process cases
(clients/conformance/README.md, "Local snowflake workers"; the same protocol in every language):
`python local_snowflake_worker.py URL NAMESPACE COUNT TTL_MS`.

Leases a worker id of NAMESPACE with a lease of TTL_MS (floor recorded TTL/2 ahead, margin and
floor wait TTL/5), retrying a full pool or an unavailable node for 30 s; prints `worker N`, then
each id on its own line as it is made (pausing 1 ms after every 10), and `error CODE` when `next` fails (once per run of one
code; it keeps trying every millisecond). Stops after COUNT ids (0: never) or when its standard
input closes, then closes the handle (releasing the lease) and prints `closed`. A refusal at
lease time prints `error CODE` and exits with status 2.
"""

from __future__ import annotations

import sys
import threading
import time

import idmint


def main() -> None:
    url, ns, count, ttl_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ttl = ttl_ms / 1000
    config = idmint.LocalSnowflakeConfig(ttl=ttl, floor_ahead=ttl / 2, safety_margin=ttl / 5,
                                         max_floor_wait=ttl / 5)
    stop = threading.Event()

    def watch_stdin() -> None:
        for _ in sys.stdin:
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    out = sys.stdout
    client = idmint.Client([url])
    deadline = time.monotonic() + 30
    while True:
        try:
            handle = client.local_snowflake(ns, config)
            break
        except idmint.IdmintError as e:
            if (e.retryable or e.code == "worker_pool_full") and time.monotonic() < deadline \
                    and not stop.is_set():
                time.sleep(0.02)
                continue
            print(f"error {e.code}", file=out, flush=True)
            sys.exit(2)
    print(f"worker {handle.worker}", file=out, flush=True)
    made = 0
    failing = None
    while (count == 0 or made < count) and not stop.is_set():
        try:
            id_ = handle.next()
        except idmint.IdmintError as e:
            if failing != e.code:
                print(f"error {e.code}", file=out, flush=True)
                failing = e.code
            time.sleep(0.001)
            continue
        print(id_, file=out, flush=True)
        made += 1
        failing = None
        if made % 10 == 0:
            time.sleep(0.001)  # a steady application, not a benchmark
    handle.close()
    client.close()
    print("closed", file=out, flush=True)


if __name__ == "__main__":
    main()
