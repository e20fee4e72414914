#!/usr/bin/env bash
# Builds @idmint/client, packs it with `npm pack`, installs the tarball into a fresh temporary
# directory's node_modules and runs the tests (node --test: the client conformance suite of
# clients/conformance and the client's own tests) against that installed package, so what is
# tested is what would be published. The examples (examples/: the README's typed handles, ESM,
# and a CommonJS module) are compiled there with `tsc --strict` as a user's project would
# compile them (type errors fail the run); test/typed.test.mjs runs their output.
#
# Needs node >= 20, npm, openssl (TLS scenarios) and the idmint binary: $IDMINT_BIN, else
# <repo>/target/debug/idmint; a missing binary fails the run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${IDMINT_BIN:-$repo/target/debug/idmint}
[[ -x $bin ]] || { echo "run_tests.sh: the idmint binary $bin is missing: build it (cargo build -p idmint-cli) or set IDMINT_BIN" >&2; exit 1; }
command -v openssl >/dev/null || { echo "run_tests.sh: openssl is missing (TLS scenarios need it)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$here"
npm ci --no-audit --no-fund --loglevel=error
tarball=$(npm pack --silent --pack-destination "$work" | tail -n 1)

cd "$work"
printf '{"name":"idmint-client-tests","private":true,"type":"module"}\n' > package.json
# prom-client (the optional peer of @idmint/client/metrics), and @types/node and typescript for
# the examples, at the versions the source tree's lockfile holds (cached by npm ci above).
dev() { node -p "require('$here/node_modules/$1/package.json').version"; }
npm install --no-audit --no-fund --prefer-offline --loglevel=error "./$tarball" \
  "prom-client@$(dev prom-client)" "@types/node@$(dev @types/node)" "typescript@$(dev typescript)"
cp "$here"/test/*.mjs .
# The package must not reach back into the source tree: only what the tarball holds.
test -f node_modules/@idmint/client/proto/idmint/v1/idmint.proto
test -f node_modules/@idmint/client/dist/index.d.ts
test -f node_modules/@idmint/client/dist/cjs/index.d.ts
mkdir examples
cp "$here"/examples/*.ts "$here"/examples/*.cts "$here"/examples/tsconfig.json examples/
node_modules/.bin/tsc --strict -p examples/tsconfig.json --outDir examples-out
# The README's quick start (its first ts block; `userId` is its one free name) type-checks too.
{ echo 'declare const userId: bigint;'; awk '/^```ts$/ { n++; if (n == 1) { on = 1; next } } /^```$/ { on = 0 } on' "$here/README.md"; echo 'export {};'; } > examples/readme.ts
printf '{"extends": "./tsconfig.json", "files": ["readme.ts"]}\n' > examples/tsconfig.readme.json
node_modules/.bin/tsc --strict -p examples/tsconfig.readme.json --noEmit
IDMINT_BIN=$bin IDMINT_REPO=$repo node --test --test-reporter=spec ./*.test.mjs
# The local snowflake process cases (clients/conformance/local_snowflake.py, python3) with this
# client's worker program, installed here against the packed tarball.
python3 "$repo/clients/conformance/local_snowflake.py" --idmint "$bin" --worker "node=node $work/local_snowflake_worker.mjs"
