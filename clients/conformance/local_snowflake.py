#!/usr/bin/env python3
"""The local snowflake process cases of the client conformance suite (README.md, "Local
snowflake workers"): real `idmint serve` and real client processes, each client a worker
program of its language speaking one protocol (`WORKER URL NAMESPACE COUNT TTL_MS`: prints
`worker N`, one id a line, `error CODE` lines, `closed`; stops when its stdin closes).

    python3 local_snowflake.py --idmint BIN --worker rust=CMD --worker python=CMD --worker node=CMD

CMD is the worker's command line (split on spaces). Every case runs per worker language, except
`at_once`, which runs one process of every language given at the same time. Standard library
only; `faketime` (libfaketime) for the clock case, which is skipped with a notice without it.

Cases (TTL 3 s for the clients' leases):
- at_once: every language at once on one namespace, beside the node's own ids: 0 duplicates,
  ids increasing per process, every process on its own worker id;
- kill9: a worker killed with SIGKILL; the next takes its worker id (the only one left) once
  the lease expired, and starts above every id the killed one printed;
- sigstop: a worker stopped (SIGSTOP) past its TTL while another takes its worker id, then
  continued: no duplicates; nothing it issues after SIGCONT falls inside the other's ids; its
  own ids keep increasing (it leases anew once the other releases);
- faketime: a worker whose clock reads 30 s behind its worker id's floor issues nothing and
  says `clock_behind_floor`;
- outage: the node stopped (SIGSTOP) for less than the lease covers: issuing goes on without an
  error; for longer than the TTL: `lease_expired`, then issuing again once the node is back;
  no duplicates, ids increasing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
TTL_MS = 3000
#: The layout of `pool` and `pair` (local_snowflake.toml.in): 41 bits of ms since 2024-01-01,
#: then 4 (pool) or 1 (pair) worker bits, 12 of sequence.
EPOCH_MS = 1_704_067_200_000


def worker_of(id_: int, node_bits: int) -> int:
    return (id_ >> 12) & ((1 << node_bits) - 1)


def ms_of(id_: int, node_bits: int) -> int:
    return (id_ >> (12 + node_bits)) + EPOCH_MS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Polls `condition` until it holds (bounded): events are awaited, never slept for."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Node:
    """One `idmint serve` on a temporary file store."""

    def __init__(self, binary: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="idmint-local-snowflake-"))
        self.http, self.grpc = free_port(), free_port()
        text = (HERE / "local_snowflake.toml.in").read_text()
        for k, v in {"HTTP": f"127.0.0.1:{self.http}", "GRPC": f"127.0.0.1:{self.grpc}",
                     "DATA_DIR": str(self.dir / "data")}.items():
            text = text.replace("{{" + k + "}}", v)
        (self.dir / "data").mkdir()
        (self.dir / "node.toml").write_text(text)
        self.process = subprocess.Popen(
            [binary, "serve", "--config", str(self.dir / "node.toml"), "--init"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "RUST_LOG": "warn"})
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("idmint listening on "):
                break
        else:
            raise RuntimeError("the node exited before listening")
        self.url = f"http://127.0.0.1:{self.grpc}"

    def ids(self, ns: str, count: int) -> list[int]:
        url = f"http://127.0.0.1:{self.http}/v1/ids/{ns}?count={count}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            import json
            return [int(i) for i in json.loads(answer.read())["ids"]]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            self.process.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)


class Worker:
    """One client process speaking the worker protocol; its output read as it comes: the ids
    in `ids` (in order), every other line in `notes` with the number of ids before it."""

    def __init__(self, command: list[str], url: str, ns: str, count: int = 0,
                 prefix: Optional[list[str]] = None) -> None:
        self.ids: list[int] = []
        self.notes: list[tuple[int, str]] = []
        self.stderr: list[str] = []
        self.process = subprocess.Popen(
            (prefix or []) + command + [url, ns, str(count), str(TTL_MS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.strip()
            if line.isdigit():
                self.ids.append(int(line))
            else:
                self.notes.append((len(self.ids), line))

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def errors(self) -> list[str]:
        return [l.split()[1] for _, l in self.notes if l.startswith("error ")]

    def said(self, text: str) -> bool:
        return any(l == text for _, l in self.notes)

    @property
    def worker(self) -> Optional[int]:
        return next((int(l.split()[1]) for _, l in self.notes if l.startswith("worker ")), None)

    def stop(self) -> None:
        """Closes stdin (a clean stop: the lease is released) and waits."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
        self.process.wait(timeout=30)
        wait_for(lambda: self.said("closed") or self.process.returncode != 0, "the output")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def describe(self) -> str:
        return f"{len(self.ids)} ids, {self.notes[-5:]} {''.join(self.stderr)[-1500:]}"


def increasing(ids: list[int], what: str) -> None:
    bad = next((i for i in range(1, len(ids)) if ids[i] <= ids[i - 1]), None)
    assert bad is None, f"{what}: id {ids[bad]} after {ids[bad - 1]}"


def unique(ids: list[int], what: str) -> None:
    assert len(set(ids)) == len(ids), f"{what}: {len(ids) - len(set(ids))} duplicates"


def case_at_once(binary: str, workers: dict[str, list[str]]) -> None:
    node = Node(binary)
    running: list[Worker] = []
    try:
        # At least three processes: the languages given, repeated as needed.
        commands = list(workers.values())
        names = list(workers)
        while len(commands) < 3:
            commands.append(commands[len(commands) % len(workers)])
            names.append(names[len(names) % len(workers)])
        for command in commands:
            running.append(Worker(command, node.url, "pool", 20_000))
        node_ids = node.ids("pool", 1000)
        for w in running:
            w.process.wait(timeout=120)
            assert w.said("closed"), f"worker did not finish: {w.describe()}"
        every = list(node_ids)
        for w, name in zip(running, names):
            ids = w.ids
            assert len(ids) == 20_000, f"{name}: {len(ids)} ids"
            increasing(ids, name)
            assert {worker_of(i, 4) for i in ids} == {w.worker}, f"{name}: another worker's ids"
            every += ids
        unique(every, "all processes and the node")
        owners = [w.worker for w in running] + [worker_of(node_ids[0], 4)]
        assert len(set(owners)) == len(owners), f"two holders of one worker id: {owners}"
    finally:
        for w in running:
            w.kill()
        node.close()


def case_kill9(binary: str, command: list[str]) -> None:
    node = Node(binary)
    a = b = None
    try:
        a = Worker(command, node.url, "pair")
        wait_for(lambda: len(a.ids) >= 2000, f"ids from the first worker {a.describe()}")
        a.kill()
        killed = list(a.ids)
        b = Worker(command, node.url, "pair", 2000)
        b.process.wait(timeout=60)
        after = b.ids
        assert len(after) == 2000, b.describe()
        assert b.worker == a.worker, f"workers {a.worker} and {b.worker} in a pool of one"
        assert min(after) > max(killed), "the next holder went below the killed one's ids"
        unique(killed + after, "kill -9")
    finally:
        for w in (a, b):
            if w is not None:
                w.kill()
        node.close()


def case_sigstop(binary: str, command: list[str]) -> None:
    node = Node(binary)
    a = b = None
    try:
        a = Worker(command, node.url, "pair")
        wait_for(lambda: len(a.ids) >= 1000, f"ids from the first worker {a.describe()}")
        a.process.send_signal(signal.SIGSTOP)
        before_stop = len(a.ids)
        b = Worker(command, node.url, "pair")
        # b gets the worker id only once a's lease expired: a stayed stopped past its TTL.
        wait_for(lambda: len(b.ids) >= 1000, f"ids from the second worker {b.describe()}", 60)
        a.process.send_signal(signal.SIGCONT)
        wait_for(lambda: bool(a.errors()), f"the first worker to find its lease over {a.describe()}")
        b.stop()
        b_ids = list(b.ids)
        # a leases anew once b released, above everything it made before.
        top = max(b_ids)
        wait_for(lambda: sum(1 for i in a.ids[before_stop:] if i > top) >= 1000,
                 f"the first worker to issue again {a.describe()}", 60)
        a.stop()
        a_ids = list(a.ids)
        increasing(a_ids, "the stopped worker")
        increasing(b_ids, "the other worker")
        unique(a_ids + b_ids, "SIGSTOP past the TTL")
        resumed = a_ids[before_stop:]
        inside = [i for i in resumed if min(b_ids) <= i <= max(b_ids)]
        assert not inside, f"{len(inside)} ids issued inside the new holder's range after SIGCONT"
    finally:
        for w in (a, b):
            if w is not None:
                w.process.send_signal(signal.SIGCONT)
                w.kill()
        node.close()


def case_faketime(binary: str, command: list[str]) -> None:
    if shutil.which("faketime") is None:
        print("  skipped: faketime (libfaketime) is not installed")
        return
    node = Node(binary)
    a = b = None
    try:
        a = Worker(command, node.url, "pair", 1000)
        a.process.wait(timeout=60)
        assert a.said("closed"), a.describe()
        b = Worker(command, node.url, "pair", 1000, prefix=["faketime", "-f", "-30s"])
        b.process.wait(timeout=60)
        assert not b.ids, f"issued {len(b.ids)} ids with the clock behind the floor"
        assert b.errors() == ["clock_behind_floor"], b.describe()
        assert b.process.returncode == 2, b.describe()
    finally:
        for w in (a, b):
            if w is not None:
                w.kill()
        node.close()


def case_outage(binary: str, command: list[str]) -> None:
    node = Node(binary)
    a = None
    try:
        a = Worker(command, node.url, "pool")
        wait_for(lambda: len(a.ids) >= 1000, f"ids {a.describe()}")
        # Shorter than the lease covers (the floor is recorded TTL/2 ahead, renewed every TTL/6).
        mark = len(a.ids)
        node.process.send_signal(signal.SIGSTOP)
        time.sleep(TTL_MS / 1000 / 6)  # the outage itself: its length is what is tested
        during = a.ids[mark:]
        node.process.send_signal(signal.SIGCONT)
        assert during, "no id during an outage shorter than the lease"
        assert not a.errors(), f"errors during a short outage: {a.errors()}"
        # Longer than the TTL: a clear error, then issuing again once the node is back.
        node.process.send_signal(signal.SIGSTOP)
        wait_for(lambda: "lease_expired" in a.errors(), f"lease_expired {a.describe()}")
        stopped_at = len(a.ids)
        time.sleep(TTL_MS / 1000)  # past the TTL
        node.process.send_signal(signal.SIGCONT)
        wait_for(lambda: len(a.ids) >= stopped_at + 1000, f"ids again {a.describe()}", 60)
        a.stop()
        ids = list(a.ids)
        increasing(ids, "across the outages")
        unique(ids, "across the outages")
        assert set(a.errors()) <= {"lease_expired", "lease_lost"}, a.errors()
    finally:
        if a is not None:
            a.kill()
        node.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idmint", required=True, help="the idmint binary")
    parser.add_argument("--worker", action="append", default=[], required=True,
                        help="LANGUAGE=COMMAND of a worker program")
    parser.add_argument("--case", action="append", default=[], help="run only these cases")
    args = parser.parse_args()
    workers = {w.split("=", 1)[0]: shlex.split(w.split("=", 1)[1]) for w in args.worker}
    per_language = {"kill9": case_kill9, "sigstop": case_sigstop, "faketime": case_faketime,
                    "outage": case_outage}
    wanted = set(args.case) or {"at_once", *per_language}
    failures = 0
    runs: list[tuple[str, Callable[[], None]]] = []
    if "at_once" in wanted:
        runs.append((f"at_once ({', '.join(workers)})", lambda: case_at_once(args.idmint, workers)))
    for name, case in per_language.items():
        if name in wanted:
            for language, command in workers.items():
                runs.append((f"{name} ({language})",
                             lambda case=case, command=command: case(args.idmint, command)))
    for label, run in runs:
        started = time.monotonic()
        try:
            run()
            print(f"ok   {label} ({time.monotonic() - started:.1f} s)", flush=True)
        except Exception as e:  # every case runs; each failure is named
            failures += 1
            print(f"FAIL {label}: {e}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
