"""The package as installed: typed, with the generated gRPC code inside."""

from __future__ import annotations

import os
from pathlib import Path

import idmint


def test_the_wheel_carries_the_generated_code_and_its_types() -> None:
    from idmint.v1 import idmint_pb2, idmint_pb2_grpc

    root = Path(idmint.__file__).parent
    assert (root / "py.typed").is_file()
    assert (root / "v1" / "idmint_pb2.pyi").is_file()
    assert idmint_pb2.NextRequest(namespace="a", count=2).count == 2
    assert hasattr(idmint_pb2_grpc, "IdmintStub")
    if os.environ.get("IDMINT_TEST_INSTALLED"):
        assert "site-packages" in str(root), f"testing {root}, not the installed wheel"
