"""One node over gRPC (`idmint.v1.Idmint`, docs/grpc.md), sync and asyncio: calls with the
bearer token and a deadline, answers as Python values, failures as typed errors (the
`idmint-error-code` trailer's class; `Unavailable` for no answer)."""

from __future__ import annotations

import uuid
from typing import Any, Optional

import grpc
import grpc.aio
from google.protobuf.json_format import MessageToDict

from .config import Tls
from .errors import IdmintError, NodeError, Unavailable, error_for, strip_code
from .types import Id, Leased, NamespaceInfo, SequenceSpec
from .ulid import ulid_from_bytes
from .v1 import idmint_pb2 as pb
from .v1 import idmint_pb2_grpc as rpc

_NO_ANSWER = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.CANCELLED)
_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.enable_http_proxy", 0)]


def _target(url: str) -> tuple[str, bool]:
    for scheme, secure in (("http://", False), ("https://", True)):
        if url.startswith(scheme):
            return url[len(scheme):].rstrip("/"), secure
    raise ValueError(f"{url!r}: a gRPC url is http://HOST:PORT or https://HOST:PORT")


def _credentials(tls: Optional[Tls]) -> grpc.ChannelCredentials:
    if tls is None:
        return grpc.ssl_channel_credentials()
    return grpc.ssl_channel_credentials(root_certificates=tls.ca_pem, private_key=tls.key_pem,
                                        certificate_chain=tls.cert_pem)


def error_of(e: grpc.RpcError, label: str) -> IdmintError:
    """A failed call as a typed error: the trailer's code, else by status."""
    details = (e.details() or "") if hasattr(e, "details") else str(e)
    metadata = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
    code = next((str(v) for k, v in (metadata or ()) if k == "idmint-error-code"), None)
    if code:
        return error_for(code, strip_code(code, details))
    status = e.code() if hasattr(e, "code") else None
    name = status.name if status is not None else "UNKNOWN"
    if status in _NO_ANSWER:
        return Unavailable(f"{label} did not answer: {name}: {details}")
    return NodeError(f"{label} answered {name}: {details}")


def ids_of(message: Any) -> list[Id]:
    """The ids of an `Ids` answer."""
    which = message.WhichOneof("ids")
    if which == "u64":
        return list(message.u64.ids)
    if which == "uuid7":
        return [uuid.UUID(bytes=bytes(b)) for b in message.uuid7.ids]
    if which == "ulid":
        return [ulid_from_bytes(bytes(b)) for b in message.ulid.ids]
    raise NodeError("the node answered ids of no known kind")


def info_of(message: Any) -> NamespaceInfo:
    kind = message.WhichOneof("kind")
    if kind is None:
        raise NodeError("the node described a namespace of no known kind")
    details = MessageToDict(message, preserving_proto_field_name=True,
                            always_print_fields_with_no_presence=True)
    spec = None
    if kind == "sequence":
        s = message.sequence.settings
        spec = SequenceSpec(width=s.width, step=s.step, offset=s.offset,
                            residues=tuple(s.residues) or (s.offset,))
    return NamespaceInfo(message.namespace, kind, spec, details)


def decoded_of(message: Any) -> dict[str, Any]:
    """A `Decoded` answer in the shape of the HTTP answer."""
    kind = message.WhichOneof("kind")
    fields = MessageToDict(getattr(message, kind), preserving_proto_field_name=True,
                           always_print_fields_with_no_presence=True)
    fields.pop("bytes", None)
    for key in ("unix_ms", "worker", "shard", "sequence", "step", "residue"):
        if key in fields:
            fields[key] = int(fields[key])
    if kind == "sequence" and fields.get("step") == 0:
        # A node older than these fields: left out, as its HTTP answer leaves them out.
        del fields["step"], fields["residue"]
    if kind in ("uuid7", "ulid"):
        fields.setdefault("timestamp", None)  # unset past the year 9999, as HTTP's null
    return {"namespace": message.namespace, "kind": kind, **fields}


class _Base:
    def __init__(self, url: str, label: str, token: Optional[str], tls: Optional[Tls],
                 timeout: float) -> None:
        self.target, self.secure = _target(url)
        self.label = label
        self.timeout = timeout
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.tls = tls


class GrpcTransport(_Base):
    """One node over gRPC, sync. Connects lazily; thread-safe."""

    def __init__(self, url: str, label: str, token: Optional[str] = None,
                 tls: Optional[Tls] = None, timeout: float = 5.0) -> None:
        super().__init__(url, label, token, tls, timeout)
        if self.secure:
            self.channel = grpc.secure_channel(self.target, _credentials(tls), _OPTIONS)
        else:
            self.channel = grpc.insecure_channel(self.target, _OPTIONS)
        self.stub = rpc.IdmintStub(self.channel)

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise error_of(e, self.label) from None

    def next(self, namespace: str, count: int, kind: str, shard: Optional[int] = None,
             key: Optional[int] = None) -> list[Id]:
        request = pb.NextRequest(namespace=namespace, count=count, shard=shard, key=key)
        return ids_of(self._call(self.stub.Next, request))

    def block(self, namespace: str, count: int, min_start: Optional[int] = None,
              extends: Optional[int] = None) -> Leased:
        b = self._call(self.stub.Block, pb.BlockRequest(namespace=namespace, count=count,
                                                        min_start=min_start, extends=extends))
        return Leased(b.start, b.end, b.step, b.lease, b.lease_start)

    def give_back(self, namespace: str, start: int, end: int, step: int, lease: int) -> bool:
        answer = self._call(self.stub.GiveBack, pb.GiveBackRequest(
            namespace=namespace, start=start, end=end, step=step, lease=lease))
        return bool(answer.given_back)

    def info(self, namespace: str) -> NamespaceInfo:
        return info_of(self._call(self.stub.Namespace, pb.NamespaceRequest(namespace=namespace)))

    def decode(self, namespace: str, id: str) -> dict[str, Any]:
        request = pb.DecodeRequest(namespace=namespace, id=id)
        return decoded_of(self._call(self.stub.Decode, request))

    def close(self) -> None:
        self.channel.close()


class AsyncGrpcTransport(_Base):
    """One node over gRPC, asyncio (grpc.aio). Create it inside the event loop that uses it."""

    def __init__(self, url: str, label: str, token: Optional[str] = None,
                 tls: Optional[Tls] = None, timeout: float = 5.0) -> None:
        super().__init__(url, label, token, tls, timeout)
        if self.secure:
            self.channel = grpc.aio.secure_channel(self.target, _credentials(tls), _OPTIONS)
        else:
            self.channel = grpc.aio.insecure_channel(self.target, _OPTIONS)
        self.stub = rpc.IdmintStub(self.channel)

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise error_of(e, self.label) from None

    async def next(self, namespace: str, count: int, kind: str, shard: Optional[int] = None,
                   key: Optional[int] = None) -> list[Id]:
        request = pb.NextRequest(namespace=namespace, count=count, shard=shard, key=key)
        return ids_of(await self._call(self.stub.Next, request))

    async def block(self, namespace: str, count: int, min_start: Optional[int] = None,
                    extends: Optional[int] = None) -> Leased:
        b = await self._call(self.stub.Block, pb.BlockRequest(
            namespace=namespace, count=count, min_start=min_start, extends=extends))
        return Leased(b.start, b.end, b.step, b.lease, b.lease_start)

    async def give_back(self, namespace: str, start: int, end: int, step: int,
                        lease: int) -> bool:
        answer = await self._call(self.stub.GiveBack, pb.GiveBackRequest(
            namespace=namespace, start=start, end=end, step=step, lease=lease))
        return bool(answer.given_back)

    async def info(self, namespace: str) -> NamespaceInfo:
        return info_of(await self._call(self.stub.Namespace,
                                        pb.NamespaceRequest(namespace=namespace)))

    async def decode(self, namespace: str, id: str) -> dict[str, Any]:
        return decoded_of(await self._call(self.stub.Decode,
                                           pb.DecodeRequest(namespace=namespace, id=id)))

    async def close(self) -> None:
        await self.channel.close()
