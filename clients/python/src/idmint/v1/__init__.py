"""The generated gRPC code of `proto/idmint/v1/idmint.proto` (package `idmint.v1`), written
by the build (hatch_build.py runs grpc_tools.protoc); not in the repository."""
