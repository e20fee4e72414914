//! The gRPC service, loaded at run time from the .proto files the package ships (`proto/`,
//! copied from the repository's at build time), so the API has one source and no generated
//! code to keep in step. 64-bit integers arrive as decimal strings (`longs: String`) and
//! become `bigint`s in `grpc.ts`, never `number`s.

import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const PROTO_ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "proto");

let service: grpc.ServiceClientConstructor | undefined;

/** The `idmint.v1.Idmint` client constructor (loaded once). */
export function idmintService(): grpc.ServiceClientConstructor {
  if (service === undefined) {
    const definition = loader.loadSync("idmint/v1/idmint.proto", {
      includeDirs: [PROTO_ROOT],
      keepCase: true,
      longs: String,
      enums: String,
      defaults: true,
      oneofs: true,
    });
    const pkg = grpc.loadPackageDefinition(definition) as unknown as {
      idmint: { v1: { Idmint: grpc.ServiceClientConstructor } };
    };
    service = pkg.idmint.v1.Idmint;
  }
  return service;
}
