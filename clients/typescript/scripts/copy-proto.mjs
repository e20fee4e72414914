// Copies the repository's proto/ into the package (it ships the .proto files the client loads at
// run time), so the package never holds a second, hand-kept copy of the API.
import { cpSync, existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "..", "..", "proto");
const target = join(root, "proto");
if (!existsSync(join(source, "idmint", "v1", "idmint.proto"))) {
  console.error(`copy-proto: ${source}/idmint/v1/idmint.proto is missing; build from the idmint repository`);
  process.exit(1);
}
rmSync(target, { recursive: true, force: true });
cpSync(source, target, { recursive: true });
