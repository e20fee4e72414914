"""Drives idmint's RESP front-end with redis-py, a client idmint does not control.

Run by crates/node/tests/resp.rs (`redis_py_gets_ids_over_resp2_and_resp3`) as
`python3 resp_client.py PORT`, against a node serving:
  orders   sequence (auto-created, step 1)
  sessions uuid7
  tweets   snowflake
Exits non-zero with a traceback on the first failed check; prints "redis-py: N checks passed".

`python3 resp_client.py PORT TOKEN` instead checks `[auth]` (crates/node/tests/auth.rs): TOKEN
may take ids of `orders.*` only.
"""

import sys
import threading

import redis

PORT = int(sys.argv[1])
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def raises(fn, prefix):
    """Expects an error reply starting with `prefix`. redis-py drops the leading word of the
    error codes it knows (`ERR`), so those are given without it."""
    try:
        got = fn()
    except redis.exceptions.ResponseError as e:
        check(str(e).startswith(prefix), f"error {str(e)!r} should start with {prefix!r}")
        return str(e)
    raise AssertionError(f"expected an error starting {prefix!r}, got {got!r}")


def auth_checks(token):
    """NOAUTH without a password, WRONGPASS with a wrong one, NOPERM outside the token's scope."""
    for protocol in (2, 3):
        if protocol == 2:
            bare = redis.Redis(port=PORT, protocol=2, socket_timeout=30)
            try:
                bare.incr("orders.py")
                raise AssertionError("INCR without AUTH was answered")
            except redis.exceptions.AuthenticationError as e:
                check("Authentication required" in str(e), f"NOAUTH: {e}")
            bare.close()
            wrong = redis.Redis(port=PORT, protocol=2, password="idmint_wrong", socket_timeout=30)
            try:
                wrong.ping()
                raise AssertionError("a wrong password was accepted")
            except redis.exceptions.AuthenticationError as e:
                check("invalid token" in str(e), f"WRONGPASS: {e}")
            wrong.close()
        r = redis.Redis(port=PORT, protocol=protocol, password=token, socket_timeout=30)
        a = r.incr("orders.py")
        check(isinstance(a, int) and r.incr("orders.py") > a, f"INCR with the token (RESP{protocol})")
        try:
            r.incr("users")
            raise AssertionError("INCR outside the token's scope was answered")
        except redis.exceptions.NoPermissionError as e:  # the NOPERM line
            check("ids scope" in str(e), f"NOPERM: {e}")
        r.close()
    print(f"redis-py: {checks} checks passed")
    sys.exit(0)


if len(sys.argv) > 2:
    auth_checks(sys.argv[2])

for protocol in (2, 3):
    r = redis.Redis(port=PORT, protocol=protocol, client_name=f"py{protocol}", socket_timeout=30)
    check(r.ping() is True, "PING")
    name = r.client_getname()
    check(name in (f"py{protocol}", f"py{protocol}".encode()), f"CLIENT SETNAME at connect: {name!r}")
    check(r.echo("hi") == b"hi", "ECHO")
    if protocol == 3:
        hello = r.execute_command("HELLO", "3")
        check(hello[b"proto"] == 3 and hello[b"server"] == b"idmint", f"HELLO 3: {hello}")

    a = r.incr("orders")
    b = r.incr("orders")
    check(isinstance(a, int) and b > a, f"INCR increases: {a}, {b}")
    last = r.incrby("orders", 10)
    check(isinstance(last, int) and last >= b + 10, f"INCRBY: {last} after {b}")
    ids = r.execute_command("IDMINT.NEXT", "orders", 5)
    check(len(ids) == 5 and ids == sorted(ids) and ids[0] > last, f"IDMINT.NEXT: {ids}")

    block = r.execute_command("IDMINT.BLOCK", "orders", 100)
    if protocol == 3:
        check(set(block) == {b"start", b"end", b"step", b"lease"}, f"BLOCK map: {block}")
        start, end, step = block[b"start"], block[b"end"], block[b"step"]
    else:
        check(block[0::2] == [b"start", b"end", b"step", b"lease"], f"BLOCK pairs: {block}")
        start, end, step = block[1], block[3], block[5]
    check(start > ids[-1] and 0 < end - start <= 100 and step == 1, f"BLOCK: {block}")

    decoded = r.execute_command("IDMINT.DECODE", "orders", str(a))
    if protocol == 2:
        decoded = dict(zip(decoded[0::2], decoded[1::2]))
    check(decoded[b"kind"] == b"sequence", f"DECODE: {decoded}")
    check(decoded[b"issued"] in (1, True), f"DECODE issued: {decoded}")

    u = r.incr("sessions")
    check(isinstance(u, bytes) and len(u) == 36 and u[14:15] == b"7", f"uuid7 INCR: {u!r}")
    t = r.incr("tweets")
    check(isinstance(t, int) and t > 0, f"snowflake INCR: {t}")
    # redis-py's incr() sends INCRBY ns 1: the same as INCR for every kind.
    check(r.incrby("tweets", 1) > t, "INCRBY 1 on a snowflake namespace")
    raises(lambda: r.incrby("sessions", 3), "WRONGKIND")
    raises(lambda: r.execute_command("IDMINT.BLOCK", "tweets", 3), "WRONGKIND")

    raises(lambda: r.get("orders"), "'GET' is not supported")
    raises(lambda: r.set("orders", 1), "'SET' is not supported")
    raises(lambda: r.execute_command("NOSUCH", "x"), "unknown command 'NOSUCH'")
    raises(lambda: r.execute_command("INCR"), "wrong number of arguments for 'incr' command")
    raises(lambda: r.execute_command("IDMINT.NEXT", "orders", 0), "count must be at least 1")
    raises(lambda: r.execute_command("IDMINT.NEXT", "orders", 10**9), "count 1000000000 is above")
    raises(lambda: r.incr("bad name"), "invalid namespace name")
    raises(lambda: r.incr("x" * 200), "invalid namespace name")
    raises(lambda: r.execute_command("IDMINT.DECODE", "orders", "nope"), '"nope" is not a decimal')
    check(r.ping() is True, "the connection survives errors")

    # Pipelining: answers in order.
    p = r.pipeline(transaction=False)
    for _ in range(200):
        p.incr("orders")
    got = p.execute()
    check(got == sorted(got) and len(set(got)) == 200, "pipelined INCRs in order")
    r.close()

# Uniqueness across connections: 4 threads, 25k ids each, over pipelines.
seen = []
lock = threading.Lock()
errors = []


def worker():
    try:
        c = redis.Redis(port=PORT, socket_timeout=60)
        mine = []
        for _ in range(25):
            p = c.pipeline(transaction=False)
            for _ in range(500):
                p.incr("orders")
            for _ in range(5):
                p.execute_command("IDMINT.NEXT", "orders", 100)
            for x in p.execute():
                mine.extend(x if isinstance(x, list) else [x])
        check(mine == sorted(mine), "ids increase per connection")
        with lock:
            seen.extend(mine)
        c.close()
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(e)


threads = [threading.Thread(target=worker) for _ in range(4)]
for th in threads:
    th.start()
for th in threads:
    th.join()
if errors:
    raise errors[0]
check(len(seen) == 4 * 25 * 1000, f"{len(seen)} ids")
check(len(set(seen)) == len(seen), "100k ids over 4 connections are unique")

print(f"redis-py: {checks} checks passed")
