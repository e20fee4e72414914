#!/usr/bin/env python3
"""A gRPC client idmint did not write: Python's grpcio, with stubs generated from the
repository's proto/idmint/v1/idmint.proto by grpcio-tools into a temporary directory.

Run by crates/node/tests/grpc.rs (a_python_grpcio_client_drives_the_server) against a node
serving the namespaces of its KINDS configuration:

    python3 crates/node/tests/grpc_client.py HOST:PORT PROTO_ROOT

    python3 crates/node/tests/grpc_client.py HOST:PORT PROTO_ROOT TOKEN

checks `[auth]` instead (crates/node/tests/auth.rs): TOKEN may take ids of `orders.*` only.

Exits non-zero on the first failed check; prints "python grpcio client: all checks passed".
Needs `python3 -m pip install grpcio grpcio-tools` (scripts/test.sh installs them).
"""

import os
import subprocess
import sys
import tempfile
import uuid


def main():
    addr, proto_root = sys.argv[1], sys.argv[2]
    out = tempfile.mkdtemp(prefix="idmint-grpc-py-")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            os.path.join(proto_root, "idmint", "v1", "idmint.proto"),
        ],
        check=True,
    )
    sys.path.insert(0, out)
    import grpc
    from idmint.v1 import idmint_pb2 as pb
    from idmint.v1 import idmint_pb2_grpc as rpc

    if len(sys.argv) > 3:
        auth_checks(grpc, pb, rpc, addr, sys.argv[3])
        print("python grpcio client: all checks passed")
        return

    with grpc.insecure_channel(addr) as channel:
        stub = rpc.IdmintStub(channel)

        # Next: 64-bit ids, packed fixed64.
        ids = stub.Next(pb.NextRequest(namespace="photos", count=3), timeout=10)
        assert ids.namespace == "photos", ids
        assert ids.WhichOneof("ids") == "u64", ids
        assert list(ids.u64.ids) == [1, 2, 3], ids

        # Next: UUIDv7 as 16 bytes each, increasing, version 7.
        ids = stub.Next(pb.NextRequest(namespace="sessions", count=5), timeout=10)
        assert ids.WhichOneof("ids") == "uuid7", ids
        raw = list(ids.uuid7.ids)
        assert len(raw) == 5 and all(len(b) == 16 for b in raw), raw
        assert raw == sorted(set(raw)), raw
        first = uuid.UUID(bytes=raw[0])
        assert first.version == 7, first

        # Decode a UUIDv7 by its text: the same bytes back.
        d = stub.Decode(pb.DecodeRequest(namespace="sessions", id=str(first)), timeout=10)
        assert d.WhichOneof("kind") == "uuid7" and d.uuid7.bytes == raw[0], d
        assert d.uuid7.HasField("timestamp") and d.uuid7.unix_ms > 1_600_000_000_000, d

        # Decode a snowflake id: worker 7.
        tweet = stub.Next(pb.NextRequest(namespace="tweets", count=1), timeout=10).u64.ids[0]
        d = stub.Decode(pb.DecodeRequest(namespace="tweets", id=str(tweet)), timeout=10)
        assert d.WhichOneof("kind") == "snowflake", d
        assert d.snowflake.id == tweet and d.snowflake.worker == 7, d
        # An instagram-layout id's node field is its shard.
        gram = stub.Next(pb.NextRequest(namespace="grams", count=1), timeout=10).u64.ids[0]
        d = stub.Decode(pb.DecodeRequest(namespace="grams", id=str(gram)), timeout=10)
        assert d.snowflake.WhichOneof("node") == "shard" and d.snowflake.shard == 5, d

        # Block, then give back the unused tail: the next ids are the tail's.
        b = stub.Block(pb.BlockRequest(namespace="photos", count=10), timeout=10)
        assert (b.start, b.end, b.step) == (4, 14, 1) and b.lease != 0, b
        r = stub.GiveBack(
            pb.GiveBackRequest(namespace="photos", start=8, end=b.end, step=b.step, lease=b.lease),
            timeout=10,
        )
        assert r.given_back and r.ids == 6, r
        assert list(stub.Next(pb.NextRequest(namespace="photos", count=2)).u64.ids) == [8, 9]

        # Namespaces and Namespace.
        names = {n.namespace for n in stub.Namespaces(pb.NamespacesRequest(), timeout=10).namespaces}
        assert names == {"photos", "tickets", "tweets", "grams", "sessions", "events"}, names
        info = stub.Namespace(pb.NamespaceRequest(namespace="photos"), timeout=10)
        assert info.WhichOneof("kind") == "sequence", info
        assert info.sequence.settings.cache == pb.CACHE_MODE_FIXED, info
        assert info.sequence.state.ids_served >= 5, info

        # Rebase and Retire (no [auth] here: open): forward-only, the answer says what moved.
        a = stub.Rebase(pb.RebaseRequest(namespace="photos", above=1_000_000), timeout=10)
        assert (a.action, a.watermark, a.retired) == ("rebase", 1_000_001, False), a
        assert list(stub.Next(pb.NextRequest(namespace="photos", count=1)).u64.ids) == [1_000_001]
        a = stub.Rebase(pb.RebaseRequest(namespace="photos", above=5), timeout=10)
        assert a.previous_watermark == a.watermark, a
        a = stub.Retire(pb.RetireRequest(namespace="tickets"), timeout=10)
        assert a.retired and a.watermark > a.previous_watermark, a

        # NextStream: 25,000 ids in chunks of at most 10,000, unique and increasing.
        streamed = []
        chunks = 0
        for msg in stub.NextStream(
            pb.NextStreamRequest(namespace="photos", total=25_000, chunk=10_000), timeout=30
        ):
            assert msg.WhichOneof("ids") == "u64" and 0 < len(msg.u64.ids) <= 10_000, len(msg.u64.ids)
            streamed.extend(msg.u64.ids)
            chunks += 1
        assert len(streamed) == 25_000 and chunks == 3, (len(streamed), chunks)
        assert all(a < b for a, b in zip(streamed, streamed[1:])), "not increasing"
        assert streamed[0] > 1_000_001, streamed[0]

        # Errors: the gRPC code, and the idmint code in the trailing metadata and the message.
        for call, code, idmint in [
            (lambda: stub.Next(pb.NextRequest(namespace="-bad", count=1), timeout=10),
             grpc.StatusCode.INVALID_ARGUMENT, "invalid_namespace"),
            (lambda: stub.Namespace(pb.NamespaceRequest(namespace="nobody"), timeout=10),
             grpc.StatusCode.NOT_FOUND, "unknown_namespace"),
            (lambda: stub.Block(pb.BlockRequest(namespace="sessions", count=1), timeout=10),
             grpc.StatusCode.FAILED_PRECONDITION, "wrong_kind"),
            (lambda: list(stub.NextStream(pb.NextStreamRequest(namespace="photos", total=0), timeout=10)),
             grpc.StatusCode.INVALID_ARGUMENT, "invalid_count"),
            (lambda: stub.Next(pb.NextRequest(namespace="tickets", count=1), timeout=10),
             grpc.StatusCode.FAILED_PRECONDITION, "namespace_retired"),
            (lambda: stub.Retire(pb.RetireRequest(namespace="sessions"), timeout=10),
             grpc.StatusCode.FAILED_PRECONDITION, "wrong_kind"),
        ]:
            try:
                call()
            except grpc.RpcError as e:
                assert e.code() == code, (e.code(), code, e.details())
                trailers = dict(e.trailing_metadata() or ())
                assert trailers.get("idmint-error-code") == idmint, (trailers, idmint)
                assert e.details().startswith(idmint + ": "), e.details()
            else:
                raise AssertionError(f"expected {code}")

    print("python grpcio client: all checks passed")


def auth_checks(grpc, pb, rpc, addr, token):
    """The token as `authorization` metadata; without it, or outside its scope, the codes."""
    bearer = [("authorization", f"Bearer {token}")]
    with grpc.insecure_channel(addr) as channel:
        stub = rpc.IdmintStub(channel)
        ids = stub.Next(pb.NextRequest(namespace="orders.grpc", count=2), metadata=bearer, timeout=10)
        assert list(ids.u64.ids) == [1, 2], ids
        for metadata, namespace, code, idmint in [
            ([], "orders.grpc", grpc.StatusCode.UNAUTHENTICATED, "unauthorized"),
            ([("authorization", "Bearer idmint_wrong")], "orders.grpc",
             grpc.StatusCode.UNAUTHENTICATED, "unauthorized"),
            (bearer, "users", grpc.StatusCode.PERMISSION_DENIED, "forbidden"),
        ]:
            try:
                stub.Next(pb.NextRequest(namespace=namespace, count=1), metadata=metadata, timeout=10)
            except grpc.RpcError as e:
                assert e.code() == code, (e.code(), code, e.details())
                trailers = dict(e.trailing_metadata() or ())
                assert trailers.get("idmint-error-code") == idmint, (trailers, idmint)
            else:
                raise AssertionError(f"expected {code}")


if __name__ == "__main__":
    main()
