// The CommonJS build (dist/cjs), next to the ESM one (dist): tsc with tsconfig.cjs.json, a
// package.json there saying its .js files are CommonJS (for Node and for TypeScript's reading
// of its .d.ts), and import.meta.url, which only src/module_dir.ts uses, replaced with the
// file's URL from __filename. Fails if any import.meta is left.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "cjs");
rmSync(out, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.cjs.json")], { stdio: "inherit" });
writeFileSync(join(out, "package.json"), '{\n  "type": "commonjs"\n}\n');
const file = join(out, "module_dir.js");
const text = readFileSync(file, "utf8");
const code = (line) => !line.trimStart().startsWith("//");
const fixed = text
  .split("\n")
  .map((line) => (code(line) ? line.replace("import.meta.url", 'require("node:url").pathToFileURL(__filename).href') : line))
  .join("\n");
if (fixed === text) throw new Error(`build-cjs: no import.meta.url in ${file}`);
writeFileSync(file, fixed);
for (const name of readdirSync(out)) {
  if (name.endsWith(".js") && readFileSync(join(out, name), "utf8").split("\n").some((l) => code(l) && l.includes("import.meta"))) {
    throw new Error(`build-cjs: import.meta left in dist/cjs/${name}, a syntax error in CommonJS`);
  }
}
