//! The gRPC service, loaded at run time from the .proto files the package ships (`proto/`,
//! copied from the repository's at build time), so the API has one source and no generated
//! code to keep in step. 64-bit integers arrive as decimal strings (`longs: String`) and
//! become `bigint`s in `grpc.ts`, never `number`s.

import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { MODULE_DIR } from "./module_dir.js";

/** The package's `proto/`: next to `dist/` (the ESM build) or to `dist/cjs/`'s parent. */
function protoRoot(): string {
  for (let dir = MODULE_DIR, i = 0; i < 3; dir = dirname(dir), i++) {
    const candidate = join(dir, "..", "proto");
    if (existsSync(join(candidate, "idmint", "v1", "idmint.proto"))) return candidate;
  }
  return join(MODULE_DIR, "..", "proto");
}

const PROTO_ROOT = protoRoot();

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
