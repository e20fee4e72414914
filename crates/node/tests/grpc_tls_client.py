#!/usr/bin/env python3
"""Python's grpcio over TLS against a node whose gRPC listener serves a certificate made at test
time: a TLS stack idmint did not write (BoringSSL inside grpcio), trusting only the test's CA.

Run by crates/node/tests/tls.rs (a_python_grpcio_client_speaks_tls):

    python3 crates/node/tests/grpc_tls_client.py localhost:PORT PROTO_ROOT CA_FILE

Exits non-zero on the first failed check; prints "python grpcio tls client: all checks passed".
Needs `python3 -m pip install grpcio grpcio-tools` (scripts/test.sh installs them).
"""

import os
import subprocess
import sys
import tempfile


def main():
    addr, proto_root, ca_file = sys.argv[1], sys.argv[2], sys.argv[3]
    out = tempfile.mkdtemp(prefix="idmint-grpc-tls-py-")
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

    with open(ca_file, "rb") as f:
        ca = f.read()
    credentials = grpc.ssl_channel_credentials(root_certificates=ca)
    with grpc.secure_channel(addr, credentials) as channel:
        stub = rpc.IdmintStub(channel)
        ids = stub.Next(pb.NextRequest(namespace="photos", count=3), timeout=10)
        assert ids.WhichOneof("ids") == "u64" and len(ids.u64.ids) == 3, ids

    # Without the CA the server's certificate is not trusted: the call fails.
    with grpc.secure_channel(addr, grpc.ssl_channel_credentials()) as channel:
        stub = rpc.IdmintStub(channel)
        try:
            stub.Next(pb.NextRequest(namespace="photos", count=1), timeout=5)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e
        else:
            raise AssertionError("a client that does not trust the CA got ids")

    print("python grpcio tls client: all checks passed")


if __name__ == "__main__":
    main()
