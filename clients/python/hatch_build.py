"""Build hook: the gRPC code is generated from `proto/idmint/v1/idmint.proto` at build time
(grpc_tools.protoc), never committed. In the repository the proto is `../../proto`; an sdist
carries its own copy under `proto/`, so a wheel builds from the sdist alone."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PROTO = Path("idmint") / "v1" / "idmint.proto"


class ProtoBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"
    generated: Optional[Path] = None

    def _proto_root(self) -> Path:
        root = Path(self.root)
        for candidate in (root / "proto", root.parent.parent / "proto"):
            if (candidate / PROTO).is_file():
                return candidate
        raise RuntimeError(f"{PROTO} not found under {root}/proto or the repository's proto/")

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        proto_root = self._proto_root()
        if self.target_name == "sdist":
            build_data["force_include"][str(proto_root / PROTO)] = str(Path("proto") / PROTO)
            return
        import grpc_tools
        from grpc_tools import protoc

        out = self.generated = Path(tempfile.mkdtemp(prefix="idmint-proto-"))
        include = Path(grpc_tools.__file__).parent / "_proto"
        status = protoc.main(["grpc_tools.protoc", f"-I{proto_root}", f"-I{include}",
                              f"--python_out={out}", f"--grpc_python_out={out}",
                              f"--pyi_out={out}", str(proto_root / PROTO)])
        if status != 0:
            raise RuntimeError(f"protoc failed ({status}) on {proto_root / PROTO}")
        for generated in sorted((out / "idmint" / "v1").glob("idmint_pb2*")):
            build_data["force_include"][str(generated)] = f"idmint/v1/{generated.name}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self.generated is not None:
            shutil.rmtree(self.generated, ignore_errors=True)
