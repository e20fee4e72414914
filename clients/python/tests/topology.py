"""Live idmint nodes for the conformance scenarios, started as clients/conformance/README.md
says: fresh ports and data directories, configuration from the templates, `idmint serve
--config FILE --init`, up once stdout says `idmint listening on`; a topology with
`"postgres": true` gets a fresh database (`TempDatabase`), dropped after its nodes stop. Every
node is stopped at the end (SIGTERM, then SIGKILL), also when a test fails.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[3]
CONFORMANCE = REPO / "clients" / "conformance"
START_TIMEOUT_S = 30.0


def idmint_bin() -> str:
    """The binary under test: $IDMINT_BIN, else <repo>/target/debug/idmint. Fails if missing."""
    path = os.environ.get("IDMINT_BIN") or str(REPO / "target" / "debug" / "idmint")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"the idmint binary is missing: {path} (build it, or set IDMINT_BIN)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempDatabase:
    """A fresh PostgreSQL database for a topology with `"postgres": true`, made and dropped
    with `psql` on $IDMINT_TEST_POSTGRES_ADDR (default 127.0.0.1:5432) as
    $IDMINT_TEST_POSTGRES_USER (default postgres; $IDMINT_TEST_POSTGRES_PASSWORD if set).
    The server unreachable or psql missing is an error saying so, never a skip."""

    _count = 0

    def __init__(self) -> None:
        addr = os.environ.get("IDMINT_TEST_POSTGRES_ADDR", "127.0.0.1:5432")
        self.host, _, port = addr.rpartition(":")
        self.port = int(port)
        self.user = os.environ.get("IDMINT_TEST_POSTGRES_USER", "postgres")
        TempDatabase._count += 1
        self.name = f"idmint_test_py_{os.getpid()}_{time.time_ns()}_{TempDatabase._count}"
        self._psql(f'CREATE DATABASE "{self.name}"')

    def _psql(self, sql: str) -> None:
        if shutil.which("psql") is None:
            raise RuntimeError("psql is missing: the owned-shard topology needs PostgreSQL "
                               "(its client, psql, and a server on 127.0.0.1:5432)")
        done = subprocess.run(
            ["psql", "-h", self.host, "-p", str(self.port), "-U", self.user, "-d", "postgres",
             "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True, timeout=30,
            env={**os.environ, "PGPASSWORD": os.environ.get("IDMINT_TEST_POSTGRES_PASSWORD", "")})
        if done.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL at {self.host}:{self.port} refused {sql!r}: {done.stderr.strip()} "
                "(these tests need a server with trust authentication for user postgres, or "
                "IDMINT_TEST_POSTGRES_ADDR/_USER/_PASSWORD)")

    def url(self) -> str:
        url = f"host={self.host} port={self.port} user={self.user} dbname={self.name}"
        password = os.environ.get("IDMINT_TEST_POSTGRES_PASSWORD")
        return url if password is None else f"{url} password='{password}'"

    def drop(self) -> None:
        self._psql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def scenarios() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFORMANCE / "scenarios.json").read_text())
    if data.get("format") != 1:
        raise RuntimeError(f"scenarios.json format {data.get('format')!r} is not 1")
    return data


@dataclass
class Node:
    name: str
    http: int
    grpc: int
    process: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)

    def kill(self) -> None:
        """SIGKILL, and wait for the process to end."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


class Topology:
    """The nodes of one topology of scenarios.json, started; `close()` stops them."""

    def __init__(self, name: str, spec: Optional[dict[str, Any]] = None) -> None:
        """The topology `name` of scenarios.json, or `spec` (a template may be an absolute
        path)."""
        spec = spec if spec is not None else scenarios()["topologies"][name]
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"idmint-{name}-"))
        self.tls = bool(spec.get("certs"))
        self.certs = self.dir / "certs"
        self.nodes: dict[str, Node] = {}
        self.client_names: list[str] = list(spec["client"])
        self.postgres: Optional[TempDatabase] = None
        try:
            if spec.get("postgres"):
                self.postgres = TempDatabase()
            if self.tls:
                if shutil.which("openssl") is None:
                    raise RuntimeError("openssl is needed for the TLS scenarios and is missing")
                subprocess.run(["bash", str(CONFORMANCE / "certs.sh"), str(self.certs)], check=True)
            for node in spec["nodes"]:
                self._start(node)
        except BaseException:
            self.close()
            raise

    def _start(self, spec: dict[str, Any]) -> None:
        name = spec["name"]
        http, grpc_port = free_port(), free_port()
        data = self.dir / name
        data.mkdir()
        upstream = spec.get("upstream")
        if upstream == "closed-port":
            upstream_url = f"http://127.0.0.1:{free_port()}"
        elif upstream is not None:
            upstream_url = f"http://127.0.0.1:{self.nodes[upstream].grpc}"
        else:
            upstream_url = ""
        text = (CONFORMANCE / spec["template"]).read_text()
        for key, value in {"HTTP": f"127.0.0.1:{http}", "GRPC": f"127.0.0.1:{grpc_port}",
                           "DATA_DIR": str(data), "CERTS": str(self.certs),
                           "UPSTREAM": upstream_url,
                           "POSTGRES": self.postgres.url() if self.postgres else ""}.items():
            text = text.replace("{{" + key + "}}", value)
        config = self.dir / f"{name}.toml"
        config.write_text(text)
        process = subprocess.Popen([idmint_bin(), "serve", "--config", str(config), "--init"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "RUST_LOG": "warn"})
        node = Node(name, http, grpc_port, process)
        self.nodes[name] = node
        lines: "queue.Queue[Optional[str]]" = queue.Queue()

        def read_stdout() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        def read_stderr() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                node.stderr.append(line)

        threading.Thread(target=read_stdout, daemon=True).start()
        threading.Thread(target=read_stderr, daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                raise RuntimeError(f"node {name} did not start within {START_TIMEOUT_S} s: "
                                   f"{''.join(node.stderr)[-2000:]}") from None
            if line is None:
                process.wait(timeout=5)
                raise RuntimeError(f"node {name} exited ({process.returncode}) before listening: "
                                   f"{''.join(node.stderr)[-2000:]}")
            if line.startswith("idmint listening on "):
                return

    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def urls(self, transport: str) -> list[str]:
        """The client's urls, in order, for `transport` (`grpc` or `http`)."""
        return [f"{self.scheme()}://127.0.0.1:"
                f"{self.nodes[n].grpc if transport == 'grpc' else self.nodes[n].http}"
                for n in self.client_names]

    def node_state(self, node: str, namespace: str, token: Optional[str] = None,
                   ca: Optional[str] = None, cert: Optional[tuple[str, str]] = None) -> Any:
        """GET /v1/namespaces/{namespace} of `node`, as JSON."""
        url = f"{self.scheme()}://127.0.0.1:{self.nodes[node].http}/v1/namespaces/{namespace}"
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        context = None
        if self.tls:
            context = ssl.create_default_context(cafile=ca)
            if cert:
                context.load_cert_chain(*cert)
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return json.loads(answer.read())

    def close(self) -> None:
        for node in self.nodes.values():
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            try:
                node.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.postgres is not None:
            self.postgres.drop()
            self.postgres = None
