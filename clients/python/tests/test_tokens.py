"""The application token exactly as `idmint token new` prints it works with this client: a
node configured with the printed entry, the client holding the printed token, over gRPC and
HTTP, sequence and UUIDv7 ids, a close that burns nothing."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

import idmint
from topology import CONFORMANCE, Topology, idmint_bin

NODE = """
[server]
http = "{{HTTP}}"
grpc = "{{GRPC}}"
data_dir = "{{DATA_DIR}}"
auto_create = false

[namespaces.orders]
kind = "sequence"

[namespaces.sessions]
kind = "uuid7"

"""


def token_new() -> tuple[str, str]:
    """The token and the `[[auth.tokens]]` entry `idmint token new` prints."""
    out = subprocess.run([idmint_bin(), "token", "new", "--name", "app"], capture_output=True,
                         text=True, check=True).stdout
    lines = out.splitlines()
    token = next(line for line in lines if line.startswith("idmint_"))
    entry = "\n".join(lines[lines.index("[[auth.tokens]]"):])
    return token, entry


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[Topology, str]]:
    token, entry = token_new()
    template = tmp_path / "app.toml.in"
    template.write_text(NODE + "[auth]\n\n" + entry + "\n")
    topology = Topology("app", {"nodes": [{"name": "a", "template": str(template)}],
                                "client": ["a"]})
    try:
        yield topology, token
    finally:
        topology.close()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_the_token_idmint_token_new_prints_takes_ids(app: tuple[Topology, str],
                                                     transport: str) -> None:
    node, token = app
    urls = node.urls(transport)
    client = (idmint.Client(urls, token=token) if transport == "grpc"
              else idmint.Client(http_urls=urls, token=token))
    assert [client.next("orders") for _ in range(3)] == [1, 2, 3]
    session = client.next("sessions")
    assert isinstance(session, uuid.UUID) and session.version == 7
    client.close()
    assert (client.stats("orders").burned, client.stats("orders").given_back) == (0, 997)


def test_the_conformance_application_token_has_the_suggested_scopes() -> None:
    _, entry = token_new()
    suggested = next(line for line in entry.splitlines() if line.startswith("scopes = "))
    template = (CONFORMANCE / "auth.toml.in").read_text()
    full = template.split('name = "full"')[1].split("[[auth.tokens]]")[0]
    assert suggested in full.splitlines()
